"""A user's choice (the corrupt policy, the units source) is an object made once from its name, whichever of
argv, conf/replay.json or a data-source option gives it, and a bad name fails as it always has."""
import pickle

import pytest

from jobs import replay
from jobs.cli import parse_replay_args
from jobs.datasource import read_options
from jobs.errors import UsageError
from jobs.plan.units.choose import UnitsFrom
from jobs.settings import CorruptPolicy, job_options, load_settings
from schemas.errors import ConfigError


@pytest.mark.parametrize("argv, message", [
    (["--on-corrupt", "ignore"], "error: argument --on-corrupt: invalid choice: 'ignore' (choose from 'fail', 'skip')"),
    (["--units-from", "files"],
     "error: argument --units-from: invalid choice: 'files' (choose from 'auto', 'consumequeue', 'commitlog')"),
])
def test_a_bad_choice_on_the_command_line_is_a_usage_error_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_replay_args(["--store", "S", "--out", "O"] + argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_a_bad_corrupt_policy_in_the_settings_file_names_file_and_key(tmp_path):
    path = tmp_path / "replay.json"
    path.write_text('{"on_corrupt": "ignore"}', encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_settings(str(path))
    assert str(err.value) == f"{path}: on_corrupt: must be fail or skip, got 'ignore'"


@pytest.mark.parametrize("option, value, message", [
    ("onCorrupt", "ignore", "rocketmq: option onCorrupt must be fail or skip, got 'ignore'"),
    ("unitsFrom", "files", "rocketmq: option unitsFrom must be auto or consumequeue or commitlog, got 'files'"),
])
def test_a_bad_choice_as_a_data_source_option_names_the_option(store_a, option, value, message):
    with pytest.raises(UsageError) as err:
        read_options({"path": str(store_a / "store"), option: value})
    assert str(err.value) == message


def test_the_names_become_objects_once_whoever_gives_them(store_a):
    settings = load_settings()
    given = job_options(settings, "S", on_corrupt="skip", units_from="commitlog")
    assert (given.on_corrupt, given.units_from) == (CorruptPolicy.SKIP, UnitsFrom.COMMIT_LOG)
    assert given.skips_damage and given.units_from.rebuilds_all
    args = parse_replay_args(["--store", "S", "--out", "O", "--on-corrupt", "skip", "--units-from", "consumequeue"])
    argv = replay.options_from(args, settings)
    assert (argv.on_corrupt, argv.units_from) == (CorruptPolicy.SKIP, UnitsFrom.CONSUME_QUEUE)
    read = read_options({"path": str(store_a / "store"), "onCorrupt": "skip", "unitsFrom": "commitlog"}).job
    assert (read.on_corrupt, read.units_from) == (CorruptPolicy.SKIP, UnitsFrom.COMMIT_LOG)


def test_the_choices_pickle_as_themselves_for_the_tasks():
    for choice in (CorruptPolicy.FAIL, CorruptPolicy.SKIP, UnitsFrom.AUTO, UnitsFrom.CONSUME_QUEUE):
        assert pickle.loads(pickle.dumps(choice)) is choice


def test_the_data_source_takes_what_it_is_not_given_from_the_settings_file(store_a, tmp_path, monkeypatch):
    plain = read_options({"path": str(store_a / "store")})
    job = plain.job
    assert (job.on_corrupt, job.units_from, job.with_body, job.verify_crc, job.retry, job.support_retry,
            job.dialect) == (CorruptPolicy.FAIL, UnitsFrom.AUTO, True, False, True, False, "5")
    assert (plain.on_subscription_error, plain.timers) == ("fail", False)
    conf = tmp_path / "replay.json"
    conf.write_text('{"on_corrupt": "skip", "with_body": false, "rocketmq_version": "4"}', encoding="utf-8")
    monkeypatch.setattr("jobs.settings.DEFAULT_FILE", str(conf))
    edited = read_options({"path": str(store_a / "store"), "withBody": "true"}).job
    assert (edited.on_corrupt, edited.with_body, edited.dialect) == (CorruptPolicy.SKIP, True, "4")
