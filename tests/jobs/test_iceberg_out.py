"""An Iceberg run's OUT (summary, offsets.json, report) holds no empty folder: the partition folders whose parts the
run moved into its tables are removed, so `spark.read.parquet` of OUT's folders never meets one (it fails with
UNABLE_TO_INFER_SCHEMA)."""
import json
import os

import pyarrow.fs as pafs
import pytest

from jobs.output.publish import remove_empty_folders
from tests.jobs.conftest import submit_job


def _empty_folders(root):
    return sorted(os.path.relpath(d, root) for d, folders, files in os.walk(root) if not folders and not files)


def test_folders_left_without_a_file_are_removed_and_the_rest_kept(tmp_path):
    for folder in ("matched/group=G1", "messages/topic=T/deeper", "audit/corrupt", "kept"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "kept" / "part-0.parquet").write_bytes(b"x")
    (tmp_path / "summary.json").write_text("{}", encoding="utf-8")
    remove_empty_folders(pafs.LocalFileSystem(), str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["kept", "summary.json"]
    assert os.listdir(tmp_path / "kept") == ["part-0.parquet"]


@pytest.mark.spark
@pytest.mark.system
def test_an_iceberg_runs_out_holds_no_empty_folder(store_a, tmp_path):
    out = tmp_path / "out"
    proc = submit_job("--store", store_a / "store", "--subscriptions", store_a / "registrations.json", "--out", out,
                      "--until", "1795237035452", "--sink", "iceberg", "--catalog-uri",
                      f"sqlite:///{tmp_path / 'catalog.db'}", "--warehouse", tmp_path / "wh")
    assert proc.returncode == 0, proc.console[-3000:]
    assert _empty_folders(out) == []
    assert {"summary.json", "offsets.json", "_SUCCESS"} <= set(os.listdir(out))
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["sink"].startswith("iceberg: namespace mqreplay of sqlite:///")  # the report's "sink" row
