"""The caller's mistakes exit 2 with one line on stderr naming the argument, before anything is read or
claimed (README "Exit codes", row 2); --help and --version answer without Spark. In-process: no JVM starts."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _one_error_line(err, word):
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and word in errors[0], err
    return errors[0]


@pytest.mark.parametrize("case, word", [
    ("missing_store", "--store"),
    ("store_is_a_file", "--store"),
    ("missing_conf", "--conf"),
    ("malformed_conf", "--conf"),
    ("conf_unknown_key", "--conf"),
    ("conf_is_a_directory", "--conf"),
    ("missing_subscriptions", "--subscriptions"),
    ("malformed_subscriptions", "--subscriptions"),
    ("unknown_choice", "--on-corrupt"),
    ("unknown_option", "--no-such-option"),
    ("empty_group", "--subscription GROUP"),
    ("comma_in_group", "--subscription GROUP"),
    ("oversized_topic", "--subscription TOPIC"),
    ("empty_in_groups", "--groups"),
    ("since_after_9999", "--since"),
    ("until_not_a_time", "--until"),
    ("empty_out", "--out"),
    ("malformed_starting_offsets", "--starting-offsets"),
    ("oversized_offset", "--starting-offsets"),
    ("missing_commitlog_dir", "--commitlog"),
])
def test_a_callers_mistake_exits_2_with_one_line_naming_the_argument(store_a, tmp_path, run_job, case, word):
    store, regs = store_a / "store", store_a / "registrations.json"
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"split_size_mb": 64,', encoding="utf-8")
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"split_size_mbb": 64}', encoding="utf-8")
    out = tmp_path / "out"
    base = ["--out", out, "--subscriptions", regs]
    args = {
        "missing_store": ["--store", tmp_path / "nowhere", *base],
        "store_is_a_file": ["--store", regs, *base],
        "missing_conf": ["--store", store, *base, "--conf", tmp_path / "no.json"],
        "malformed_conf": ["--store", store, *base, "--conf", bad_json],
        "conf_unknown_key": ["--store", store, *base, "--conf", unknown],
        "conf_is_a_directory": ["--store", store, *base, "--conf", tmp_path],
        "missing_subscriptions": ["--store", store, "--out", out, "--subscriptions", tmp_path / "no.json"],
        "malformed_subscriptions": ["--store", store, "--out", out, "--subscriptions", bad_json],
        "unknown_choice": ["--store", store, *base, "--on-corrupt", "ignore"],
        "unknown_option": ["--store", store, *base, "--no-such-option"],
        "empty_group": ["--store", store, "--out", out, "--subscription", "", "TopicTest", "TAG", "*"],
        "comma_in_group": ["--store", store, "--out", out, "--subscription", "G1,G2", "TopicTest", "TAG", "*"],
        "oversized_topic": ["--store", store, "--out", out, "--subscription", "G", "T" * 128, "TAG", "*"],
        "empty_in_groups": ["--store", store, *base, "--groups", "G_TAG_A,,G_TAG_B"],
        "since_after_9999": ["--store", store, *base, "--since", "1795237035000000"],
        "until_not_a_time": ["--store", store, *base, "--until", "yesterday"],
        "empty_out": ["--store", store, "--out", "", "--subscriptions", regs],
        "malformed_starting_offsets": ["--store", store, *base, "--starting-offsets", '{"TopicTest": {"0": 1'],
        "oversized_offset": ["--store", store, *base, "--starting-offsets", '{"TopicTest": {"0": %d}}' % (1 << 63)],
        "missing_commitlog_dir": ["--store", store, *base, "--commitlog", tmp_path / "no-commitlog"],
    }[case]
    code, stdout, stderr = run_job(*args)
    assert code == 2, stderr
    _one_error_line(stderr, word)
    assert stdout == ""  # diagnostics only on stderr
    assert not out.exists() and not (tmp_path / "out.claim").exists()


def test_an_unreadable_store_exits_2_naming_it(store_a, tmp_path, run_job):
    if os.geteuid() == 0:
        pytest.skip("root reads every directory")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0)
    try:
        code, _, stderr = run_job("--store", locked, "--out", tmp_path / "out")
    finally:
        locked.chmod(0o700)
    assert code == 2 and "not readable" in _one_error_line(stderr, "--store")


def test_damaged_store_config_is_still_input_damage_exit_1(store_a, tmp_path, run_job):
    from tests.jobs.conftest import writable_copy

    store = writable_copy(store_a, tmp_path)
    (store / "config" / "topics.json").write_text('{"topicConfigTable": {', encoding="utf-8")
    code, stdout, stderr = run_job("--store", store, "--out", tmp_path / "out", "--subscriptions",
                                   store_a / "registrations.json")
    assert code == 1 and "topics.json" in _one_error_line(stderr, "config")
    assert stdout == ""


def test_version_answers_from_the_package_metadata_without_pyspark():
    from importlib import metadata

    started = time.time()
    proc = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "jobs" / "replay.py"), "--version"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == f"mqreplay {metadata.version('mqreplay')}"
    assert time.time() - started < 4
    assert "pyspark" not in proc.stderr  # -X importtime lists every module imported, on stderr


def test_help_answers_on_stdout_without_pyspark():
    proc = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "jobs" / "replay.py"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--store" in proc.stdout and "--version" in proc.stdout
    assert "pyspark" not in proc.stderr


def test_settings_file_shape_refused_is_named_by_its_key(store_a, tmp_path, run_job):
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps({"on_corrupt": "ignore"}), encoding="utf-8")
    code, _, stderr = run_job("--store", store_a / "store", "--out", tmp_path / "out", "--conf", conf)
    assert code == 2 and "on_corrupt" in _one_error_line(stderr, "--conf")


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_the_venvs_spark_submit_answers_version_and_help_without_a_jvm(flag):
    submit = Path(sys.executable).parent / "spark-submit"
    proc = subprocess.run([str(submit), str(ROOT / "jobs" / "replay.py"), flag], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and ("mqreplay " if flag == "--version" else "--store") in proc.stdout
    assert proc.stderr == ""  # a JVM would have said something (its module warning, Spark's first lines)


@pytest.mark.parametrize("given", [["--rocketmq-version", "6"], ["--rocketmq-version=3"]])
def test_the_venvs_spark_submit_refuses_a_rocketmq_version_without_a_jvm(given):
    submit = Path(sys.executable).parent / "spark-submit"
    proc = subprocess.run([str(submit), str(ROOT / "jobs" / "replay.py"), "--store", "/nowhere", "--out", "/nowhere",
                           *given], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "--rocketmq-version: invalid choice" in proc.stderr
    assert "incubator" not in proc.stderr and "WARN" not in proc.stderr  # no JVM's first lines
