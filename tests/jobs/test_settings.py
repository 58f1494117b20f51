"""Every default once: conf/replay.json (the file a user edits) holds exactly the code's defaults, a settings
file is checked when loaded, and the settings reach the job's and explain's options through one builder."""
import json
from pathlib import Path

import pytest

from jobs import replay
from jobs.cli import parse_replay_args
from jobs.settings import DEFAULTS, CorruptPolicy, JobOptions, job_options, load_settings
from schemas.errors import ConfigError

SHIPPED = Path(__file__).resolve().parents[2] / "conf" / "replay.json"


def test_the_shipped_settings_file_holds_the_codes_defaults():
    shipped = {k: v for k, v in json.loads(SHIPPED.read_text(encoding="utf-8")).items() if not k.startswith("_")}
    assert set(shipped) == set(DEFAULTS)
    assert {k: v for k, v in shipped.items() if k != "spark"} == {k: v for k, v in DEFAULTS.items() if k != "spark"}


def test_a_default_job_option_is_the_settings_default():
    """JobOptions built directly (tests, tools) and through job_options from the defaults agree field by field."""
    assert job_options(load_settings(SHIPPED), "S") == JobOptions(store="S")


@pytest.mark.parametrize("text, key", [('{"split_size_mb": "128"}', "split_size_mb"),
                                       ('{"on_corrupt": "ignore"}', "on_corrupt"),
                                       ('{"verify_crc": "yes"}', "verify_crc"),
                                       ('{"split_sise_mb": 64}', None)])
def test_a_wrong_setting_is_refused_naming_it(tmp_path, text, key):
    path = tmp_path / "replay.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_settings(str(path))
    assert str(path) in str(err.value) and (key is None or key in str(err.value))
    assert err.value.exit_code == 1


def test_the_settings_reach_the_jobs_options_and_the_command_line_wins(tmp_path):
    path = tmp_path / "replay.json"
    path.write_text('{"split_size_mb": 64, "bloom_f": 10, "bloom_n": 16, "on_corrupt": "skip", "with_body": false, '
                    '"rocketmq_version": 4}', encoding="utf-8")
    settings = load_settings(str(path))
    args = parse_replay_args(["--store", "S", "--out", "O", "--rocketmq-version", "5"])
    options = replay.options_from(args, settings)
    assert (options.split_size, options.bloom_f, options.bloom_n, options.on_corrupt, options.with_body,
            options.dialect) == (64 << 20, 10, 16, CorruptPolicy.SKIP, False, "5")
    args = parse_replay_args(["--store", "S", "--out", "O", "--on-corrupt", "fail"])
    assert replay.options_from(args, settings).on_corrupt is CorruptPolicy.FAIL
