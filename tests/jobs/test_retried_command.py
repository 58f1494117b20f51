"""A scheduler's retry of a run that completed (a kill that reached the JVM after OUT was published) is harmless:
the same command on that OUT exits as the run did, says so and changes nothing; any other command on it is
refused as before (exit 2). docs/scheduler.md, "A retry of the same command"."""
import os
import shutil
from argparse import Namespace

import pytest

from jobs.output.command import fingerprint
from jobs.plan.brokers import brokers_of
from tests.jobs.conftest import submit_job


def _snapshot(root):
    """{relative path: (bytes, mtime_ns)} of every file under root, and the names beside it."""
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, root)] = (f.read(), os.stat(path).st_mtime_ns)
    return files, sorted(os.listdir(os.path.dirname(root)))


@pytest.mark.spark
@pytest.mark.system
def test_the_same_command_again_exits_0_and_changes_nothing_another_is_refused(store_a, tmp_path, run_job):
    subs = tmp_path / "subs.json"
    shutil.copy(store_a / "registrations.json", subs)
    out = tmp_path / "out"
    command = ["--store", store_a / "store", "--subscriptions", subs, "--out", out, "--until", "1795237035452"]
    first = submit_job(*command)
    assert first.returncode == 0, first.console
    before = _snapshot(out)

    code, stdout, stderr = run_job(*command, "--progress", "off")  # how it runs may differ: the same command
    assert code == 0, stderr
    assert f"output: {out} is already the complete output of this same command" in stdout
    assert "G_TAG_A " in stdout  # the summary table of the run that published OUT
    assert _snapshot(out) == before  # not a byte, not a time, no claim file beside OUT

    for other in (["--groups", "G_TAG_A"], ["--until", "1795237035453"]):
        changed = [*command[:-2], *other] if other[0] == "--until" else [*command, *other]
        code, _, stderr = run_job(*changed)
        assert code == 2 and f"--out {out} exists" in stderr, (other, stderr)
    subs.write_text(subs.read_text(encoding="utf-8").replace("TagA", "TagB", 1), encoding="utf-8")
    code, _, stderr = run_job(*command)  # the same text, a subscriptions file of other content
    assert code == 2 and f"--out {out} exists" in stderr, stderr
    assert _snapshot(out) == before


def _args(**given):
    base = dict(store=[], brokers=None, out="/o", commitlog=None, subscriptions=[], subscription=[], conf=None,
                starting_offsets=None, ending_offsets=None, since=None, until=None, groups=None, progress="auto",
                master=None, overwrite=False, clean_stale=False)
    return Namespace(**{**base, **given})


def test_what_makes_two_commands_the_same(store_a, tmp_path):
    subs = tmp_path / "subs.json"
    shutil.copy(store_a / "registrations.json", subs)
    store = str(store_a / "store")
    brokers = brokers_of([store])
    same = _args(store=[store], subscriptions=[str(subs)])
    first = fingerprint(same, brokers)
    assert fingerprint(_args(store=[store], subscriptions=[str(subs)], progress="log", master="local[4]",
                             clean_stale=True), brokers) == first  # how it runs: the same command
    assert fingerprint(_args(store=[store], subscriptions=[str(subs)], groups="G_TAG_A"), brokers) != first
    copy = tmp_path / "copy"
    shutil.copytree(store_a / "store", copy)  # the same store under another path: another --store text
    of_copy = fingerprint(_args(store=[str(copy)], subscriptions=[str(subs)]), brokers_of([str(copy)]))
    assert of_copy != first
    (copy / "config" / "consumerFilter.json").chmod(0o644)
    (copy / "config" / "consumerFilter.json").write_text('{"filterDataByTopic": {}}', encoding="utf-8")
    assert fingerprint(_args(store=[str(copy)], subscriptions=[str(subs)]), brokers_of([str(copy)])) != of_copy
    subs.write_text("{}", encoding="utf-8")
    assert fingerprint(same, brokers) != first  # the subscriptions' content, not their file's name
