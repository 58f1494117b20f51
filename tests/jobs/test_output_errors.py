"""An output that cannot be written (OUT, the warehouse, the catalog) is the output's error: exit 2 naming it and
what to do, never exit 1 "input damaged" nor exit 5 with a library's text. In-process: no JVM starts (every case
is found before Spark)."""
import errno
import os

import pytest

from jobs import maintain, replay
from jobs.errors import OutputError, outcome
from jobs.output import claim
from jobs.output.publish import writing


@pytest.fixture
def run(tmp_path, monkeypatch, capsys):
    """main() of the job with a log directory of the test's own; (code, stdout, stderr)."""
    monkeypatch.setenv("MQREPLAY_LOG", str(tmp_path / "logs"))
    monkeypatch.delenv("MQREPLAY_RUN", raising=False)
    monkeypatch.delenv("MQREPLAY_LOG_FILE", raising=False)

    def go(main, *args):
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err
    return go


def _error_line(err):
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    return errors[0]


def test_an_out_under_a_file_exits_2_naming_out(store_a, tmp_path, run):
    (tmp_path / "a_file").write_text("not a directory", encoding="utf-8")
    out = tmp_path / "a_file" / "out"
    code, _, err = run(replay.main, "--store", store_a / "store", "--subscriptions", store_a / "registrations.json",
                       "--out", out)
    line = _error_line(err)
    assert code == 2 and f"--out {out}: cannot be written" in line, err
    assert "damaged" not in line


def test_a_read_only_out_exits_2_naming_out_not_input_damaged(store_a, tmp_path, run, monkeypatch):
    real_open = os.open

    def read_only(path, *args, **kwargs):  # a read-only filesystem (root writes past permission bits)
        if str(path).endswith(claim.SUFFIX):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(claim.os, "open", read_only)
    out = tmp_path / "out"
    code, _, err = run(replay.main, "--store", store_a / "store", "--subscriptions", store_a / "registrations.json",
                       "--out", out)
    line = _error_line(err)
    assert code == 2 and f"--out {out}: cannot be written (Read-only file system: {out}.claim)" in line, err
    assert not out.exists()


def test_an_error_writing_an_output_after_the_stage_is_the_outputs_exit_2():
    with pytest.raises(OutputError) as raised:
        with writing("--out /x/out"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/x/out.tmp-1/summary.json")
    assert outcome(raised.value) == (2, "--out /x/out: cannot be written (No space left on device: "
                                        "/x/out.tmp-1/summary.json)")


@pytest.fixture
def random_catalog(tmp_path):
    path = tmp_path / "catalog.db"
    path.write_bytes(bytes(range(256)) * 16)  # no SQLite header: what a copy of the wrong file looks like
    return path


def test_a_catalog_of_random_bytes_exits_2_naming_the_file_and_the_repair(store_a, tmp_path, run, random_catalog):
    code, _, err = run(replay.main, "--store", store_a / "store", "--subscriptions", store_a / "registrations.json",
                       "--out", tmp_path / "out", "--sink", "iceberg", "--catalog-uri", f"sqlite:///{random_catalog}",
                       "--warehouse", tmp_path / "wh", "--namespace", "nightly")
    line = _error_line(err)
    assert code == 2, err
    assert f"{random_catalog} is not a catalog database" in line and "Restore it from a backup" in line
    assert (f"python -m jobs.maintain --catalog-uri sqlite:///{random_catalog} --warehouse {tmp_path / 'wh'} "
            "--namespace nightly --register-existing") in line
    assert "sqlalche.me" not in line and not (tmp_path / "out").exists()


def test_maintain_on_a_catalog_of_random_bytes_exits_2_the_same(tmp_path, run, random_catalog):
    code, _, err = run(maintain.main, "--catalog-uri", f"sqlite:///{random_catalog}", "--warehouse", tmp_path / "wh",
                       "--namespace", "nightly", "--compact")
    line = _error_line(err)
    assert code == 2 and f"{random_catalog} is not a catalog database" in line and "--register-existing" in line
