"""--store and --out as file:// URIs: the store read through pyarrow.fs.FileSystem.from_uri, the outputs
written by the tasks with pyarrow, and the publish step (rename of OUT.tmp-*) through pyarrow again."""
import json

import pytest

from tests.jobs.conftest import assert_rows_equal
from tests.jobs.test_replay_spark import _parquet_rows, _submit

pytestmark = [pytest.mark.spark, pytest.mark.system]


@pytest.fixture(scope="module")
def uri_out(store_a, tmp_path_factory):
    parent = tmp_path_factory.mktemp("uri")
    store_uri, out_uri = (store_a / "store").as_uri(), (parent / "out").as_uri()
    assert store_uri.startswith("file:///") and out_uri.startswith("file:///")
    proc = _submit("--store", store_uri, "--out", out_uri, "--subscriptions", store_a / "registrations.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return parent, store_uri, out_uri, proc


def test_file_uris_give_the_expected_matched_rows(uri_out, store_a_expected):
    parent, _, _, _ = uri_out
    assert_rows_equal(_parquet_rows(parent / "out" / "matched"), store_a_expected[0])


def test_file_uris_give_the_expected_collisions(uri_out, store_a_expected):
    parent, _, _, _ = uri_out
    assert_rows_equal(_parquet_rows(parent / "out" / "audit" / "collisions"), store_a_expected[1])


def test_out_uri_is_published_whole_with_the_store_uri_in_the_summary(uri_out):
    parent, store_uri, out_uri, proc = uri_out
    assert [p.name for p in parent.iterdir()] == ["out"]  # no OUT.tmp-* left, no literal "file:" folder
    summary = json.loads((parent / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["store"] == store_uri and not summary["failed_subscriptions"]
    assert out_uri in proc.stdout


def test_existing_out_uri_is_refused(uri_out, store_a):
    _, store_uri, out_uri, _ = uri_out
    proc = _submit("--store", store_uri, "--out", out_uri)
    assert proc.returncode == 2 and "exists" in proc.stdout + proc.stderr
