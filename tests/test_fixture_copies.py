"""tests/data holds copies of ../shared/fixtures so the suite runs in a clone without ../shared."""
import gzip
import tarfile
from pathlib import Path

import pytest

from tests.conftest import DATA

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/fixtures is not beside this clone")


@needs_shared
@pytest.mark.parametrize("relpath", sorted(
    str(p.relative_to(SHARED)) for p in SHARED.glob("*/*.jsonl")))
def test_jsonl_copy_equals_shared_fixture(relpath):
    with gzip.open(DATA / (relpath + ".gz"), "rb") as f:
        assert f.read() == (SHARED / relpath).read_bytes()


@needs_shared
@pytest.mark.parametrize("name", ["store_a", "store_dledger", "store_5x", "store_trans", "store_trace"])
def test_store_copy_equals_shared_fixture(name):
    with tarfile.open(DATA / "stores" / f"{name}.tar.gz") as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
        shared_files = {str(p.relative_to(SHARED / "stores")): p
                        for p in (SHARED / "stores" / name).rglob("*") if p.is_file()}
        assert set(members) == set(shared_files)
        for name, path in shared_files.items():
            assert tar.extractfile(members[name]).read() == path.read_bytes(), name
