"""tools/compare_outputs.py (what `make cluster-test` checks a cluster's run with) compares two runs' answers: two
runs of the same job differ in their run id and timings, never a result, and are identical to it."""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import compare_outputs  # noqa: E402


def _summary(out, **given):
    out.mkdir()
    summary = {"run": "0a1b2c3d", "job_seconds": 7.6, "store": "/data/store", "subscriptions": [{"group": "G"}],
               **given}
    (out / "summary.json").write_text(json.dumps(summary), encoding="utf-8")


def test_two_runs_differ_in_their_id_and_timings_only(tmp_path):
    _summary(tmp_path / "a")
    _summary(tmp_path / "b", run="9f8e7d6c", job_seconds=9.1)
    assert compare_outputs.compare_summaries(tmp_path / "a", tmp_path / "b") == []


def test_a_result_that_differs_is_still_found(tmp_path):
    _summary(tmp_path / "a")
    _summary(tmp_path / "b", run="9f8e7d6c", subscriptions=[{"group": "H"}])
    found = compare_outputs.compare_summaries(tmp_path / "a", tmp_path / "b")
    assert found == ["summary.json differs in ['subscriptions']"]
