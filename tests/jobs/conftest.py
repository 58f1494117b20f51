"""Expected results of fixture store_a, from RocketMQ's own read path."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import replay


def expected_rows(path):
    """{(group, topic, queue_id, queue_offset): row} of an expected*.json file."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return {(g, t, r["queueId"], r["queueOffset"]): r for g, topics in data.items() for t, rows in topics.items()
            for r in rows}


@pytest.fixture(scope="session")
def store_a_expected(store_a):
    final = expected_rows(store_a / "expected.json")
    raw = expected_rows(store_a / "expected_broker_raw.json")
    return final, {k: v for k, v in raw.items() if k not in final}


FIELDS = [("commitLogOffset", "commitlog_offset"), ("msgId", "msg_id"), ("tags", "tags"), ("keys", "keys"),
          ("storeTimestamp", "store_timestamp"), ("bornTimestamp", "born_timestamp")]


def assert_rows_equal(got_rows, want):
    """Row for row, every field RocketMQ listed."""
    got = {(r["group"], r["topic"], r["queue_id"], r["queue_offset"]): r for r in got_rows}
    assert len(got) == len(got_rows), "duplicate output rows"
    assert sorted(set(want) - set(got))[:5] == [] and sorted(set(got) - set(want))[:5] == []
    wrong = [(k, j) for k, w in want.items() for j, c in FIELDS if w[j] != got[k][c]]
    assert not wrong[:5]


def writable_copy(store_a, tmp_path):
    """A writable copy of store_a/store under tmp_path, to damage or append to."""
    dst = tmp_path / "store"
    shutil.copytree(store_a / "store", dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def submit_job(*args):
    """`spark-submit jobs/replay.py ...` with the running venv's bound wrapper, as a user runs it; the process
    with `console`, its stdout and stderr together."""
    root = Path(__file__).resolve().parents[2]
    submit = Path(sys.executable).parent / "spark-submit"
    cmd = [str(submit), "--master", "local[2]", str(root / "jobs" / "replay.py"), *map(str, args)]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    proc.console = proc.stdout + proc.stderr
    return proc


@pytest.fixture
def run_job(tmp_path, monkeypatch, capsys):
    """main() of the job in this process, with a log directory of the test's own: go(*args) -> (code, stdout,
    stderr)."""
    monkeypatch.setenv("MQREPLAY_LOG", str(tmp_path / "logs"))
    monkeypatch.delenv("MQREPLAY_RUN", raising=False)
    monkeypatch.delenv("MQREPLAY_LOG_FILE", raising=False)

    def go(*args):
        code = replay.main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err
    return go
