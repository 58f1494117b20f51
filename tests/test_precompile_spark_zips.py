"""tools/precompile_spark_zips.py: zipimport loads the added bytecode, sources and data stay, reruns are no-ops."""
import importlib
import os
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

from precompile_spark_zips import precompile  # noqa: E402


def test_zipimport_loads_the_added_bytecode_and_data_files_stay(tmp_path, monkeypatch):
    path = tmp_path / "lib.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("zpkg/__init__.py", "VALUE = 41 + 1\n")
        z.writestr("zpkg/errors.json", '{"a": 1}')
    assert precompile(str(path)) == 1
    with zipfile.ZipFile(path) as z:
        assert sorted(z.namelist()) == ["zpkg/__init__.py", "zpkg/__init__.pyc", "zpkg/errors.json"]
        assert z.read("zpkg/errors.json") == b'{"a": 1}'
    monkeypatch.syspath_prepend(str(path))
    module = importlib.import_module("zpkg")
    try:
        assert module.VALUE == 42
        assert module.__file__.endswith("__init__.pyc")  # zipimport took the bytecode: its stamp matched
    finally:
        del sys.modules["zpkg"]
    assert precompile(str(path)) == 0
