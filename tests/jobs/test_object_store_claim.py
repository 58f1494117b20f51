"""One run per OUT on S3 for real (issue 59 item 6), against a local S3 server (moto's, tools/local_s3.py): runs
racing for one OUT, from threads and as two spark-submits, get one claim between them and the loser is told who
holds it; two runs taking over the same dead claim cannot both win; a released claim is never written back by
its renewing thread, and a claim taken over is never written again by the run that lost it."""
import json
import random
import subprocess
import threading
import time

import pyarrow.dataset as ds
import pytest

from jobs.output import claim
from tests.jobs.test_exit_codes import ROOT
from tests.jobs.test_object_store import _download, _env, _objects
from tests.jobs.test_scheduler_runs import SUBMIT, _slow_filters
from tools.local_s3 import LocalS3

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def server():
    with LocalS3() as s3:
        s3.filesystem().create_dir("claims")
        yield s3


@pytest.fixture
def s3(server, monkeypatch):
    """The server, its keys and endpoint in this process's environment (as a run on S3 has them)."""
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    return server


def _take(kind, out, run):
    """A claim on `out` by run `run`: the conditional one that S3 gets, or the lease of stores without one."""
    if kind == "conditional":
        return claim.acquire(out, run=run)
    fs, path = claim.claim_path(out)
    return claim.LeaseClaim.take(out, fs, path, claim._holder(out, run))


def _race(takes):
    """Call every take at the same moment (a barrier), each in a thread: [the claim or the exception] in order."""
    barrier = threading.Barrier(len(takes))
    results = [None] * len(takes)

    def run(i):
        barrier.wait()
        try:
            results[i] = takes[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(takes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _one_won(results, out):
    """The one claim among `results`; the other is a ClaimRefused naming it."""
    won = [r for r in results if isinstance(r, (claim.S3Claim, claim.LeaseClaim))]
    lost = [r for r in results if isinstance(r, claim.ClaimRefused)]
    assert len(won) == 1 and len(lost) == 1, f"{out}: {results}"
    assert f"is claimed by run {won[0].run} " in str(lost[0])
    return won[0]


def test_two_runs_racing_for_an_s3_out_get_one_claim_and_the_other_is_told_who_holds_it(s3):
    for i in range(20):
        out = f"s3://claims/race-{i}"
        won = _one_won(_race([lambda: _take("conditional", out, f"first{i}"),
                              lambda: _take("conditional", out, f"second{i}")]), out)
        assert isinstance(won, claim.S3Claim) and won.holds()
        won.release()


def test_two_runs_taking_over_one_dead_claim_cannot_both_win(s3, capsys):
    for i in range(10):
        out = f"s3://claims/dead-{i}"
        dead = claim._holder(out, f"dead{i}")
        dead["renewed"] = time.time() - 2 * claim.EXPIRE_S
        with s3.filesystem().open_output_stream(f"claims/dead-{i}{claim.SUFFIX}") as f:
            f.write(json.dumps(dead).encode())
        won = _one_won(_race([lambda: _take("conditional", out, f"first{i}"),
                              lambda: _take("conditional", out, f"second{i}")]), out)
        won.release()
    assert "taking over the claim on s3://claims/dead-0 of run dead0" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["conditional", "lease"])
def test_a_released_claim_is_not_written_back_by_its_renewer_so_the_next_run_takes_it_at_once(
        s3, monkeypatch, kind):
    monkeypatch.setattr(claim, "RENEW_S", 0.05)
    monkeypatch.setattr(claim, "SETTLE_S", 0.0)  # the lease's pause: no other run writes here
    out = f"s3://claims/released-{kind}"
    previous = _take(kind, out, "run0")
    for i in range(1, 201):
        time.sleep(random.uniform(0, 2 * claim.RENEW_S))  # the renewer anywhere: waiting, reading, writing
        previous.release()
        previous = _take(kind, out, f"run{i}")  # refused if the released run's renewer wrote its claim back
    previous.release()
    time.sleep(4 * claim.RENEW_S)
    assert f"claims/released-{kind}{claim.SUFFIX}" not in _objects(s3.filesystem(), "claims")


def test_release_returns_at_once_while_the_renewer_waits(s3):
    held = _take("conditional", "s3://claims/prompt", "prompt")
    started = time.monotonic()
    held.release()
    assert time.monotonic() - started < 1.0 and not held._thread.is_alive()


def test_a_run_whose_claim_was_taken_over_never_writes_it_again(s3, monkeypatch):
    monkeypatch.setattr(claim, "RENEW_S", 0.05)
    held = _take("conditional", "s3://claims/taken", "slow")
    taker = claim._holder("s3://claims/taken", "taker")
    with s3.filesystem().open_output_stream(f"claims/taken{claim.SUFFIX}") as f:  # as a run taking it over
        f.write(json.dumps(taker).encode())
    time.sleep(10 * claim.RENEW_S)
    assert not held.holds() and not held._thread.is_alive()
    with s3.filesystem().open_input_stream(f"claims/taken{claim.SUFFIX}") as f:
        assert json.loads(f.read())["run"] == "taker"
    held.release()  # leaves the taker's claim as it is
    assert f"claims/taken{claim.SUFFIX}" in _objects(s3.filesystem(), "claims")


@pytest.mark.spark
def test_two_spark_submits_racing_for_an_s3_out_publish_once_and_the_loser_names_the_holder(s3, store_a, tmp_path):
    s3.upload(store_a / "store", "claims", "store_a")
    cmd = [str(SUBMIT), "--master", "local[2]", "--py-files", str(_slow_filters(tmp_path)),
           str(ROOT / "jobs" / "replay.py"), "--store", "s3://claims/store_a", "--out", "s3://claims/raced",
           "--subscription", "G_SLOW", "TopicTest", "PYTHON", "tests.jobs.slow_filters:slow_keep_all"]
    runs = [subprocess.Popen(cmd, cwd=ROOT, env=_env(s3.endpoint), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    ended = [(run.returncode, err) for run in runs for _, err in [run.communicate(timeout=600)]]
    assert sorted(code for code, _ in ended) == [0, 2], [err[-3000:] for _, err in ended]
    published = _download(s3.filesystem(), "claims/raced", tmp_path / "raced")
    holder = json.loads((published / "_SUCCESS").read_text())["run"]
    loser = next(err for code, err in ended if code == 2)
    assert f"is claimed by run {holder} " in loser, loser[-3000:]
    assert ds.dataset(published / "matched").count_rows() > 0
    assert [p for p in _objects(s3.filesystem(), "claims") if p.startswith("claims/raced.")] == []


def test_an_s3_out_in_a_missing_bucket_is_said_to_be_unwritable_not_claimed(s3):
    with pytest.raises(OSError, match="NoSuchBucket"):
        claim.acquire("s3://no-such-bucket/out", run="nobucket")
