"""An epoch number that can only be seconds (before 2001 read as milliseconds) is refused wherever a store
time is given: --since/--until of the job and of explain, since/until of the data source. Read as
milliseconds it put the window's bound in 1970, and the whole store ran without a word."""
import re

import pytest

from jobs import explain, replay
from jobs.plan.window import parse_store_time

SECONDS = "1795237035"  # 2026-11-21T12:57:15+08:00, in epoch seconds
HINT = "1795237035 reads as 1970-01-21 in epoch milliseconds: did you mean seconds? write 1795237035000"


@pytest.mark.parametrize("text, message", [
    (SECONDS, HINT),
    ("978307199999", "978307199999 reads as 2000-12-31 in epoch milliseconds, before any broker stored a message: "
                     "give epoch milliseconds or ISO-8601 with an offset"),
    ("-1795237035000", "-1795237035000 is before 1970 in epoch milliseconds: give epoch milliseconds or ISO-8601 "
                       "with an offset"),
])
def test_a_number_before_2001_is_not_a_store_time(text, message):
    with pytest.raises(ValueError) as err:
        parse_store_time(text)
    assert str(err.value) == message


def test_2001_in_epoch_milliseconds_is_a_store_time():
    assert parse_store_time("978307200000") == 978307200000  # 2001-01-01T00:00:00Z


@pytest.mark.parametrize("flag", ["--since", "--until"])
def test_the_job_exits_2_on_epoch_seconds_and_writes_nothing(store_a, tmp_path, capsys, flag):
    code = replay.main(["--store", str(store_a / "store"), "--subscriptions", str(store_a / "registrations.json"),
                        "--out", str(tmp_path / "out"), flag, SECONDS])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert (code, errors) == (2, [f"error: {flag}: {HINT}"])
    assert not list(tmp_path.iterdir())


def test_explain_exits_2_on_epoch_seconds_with_one_line(store_a, capsys):
    code = explain.main([str(a) for a in (
        "--store", store_a / "store", "--subscriptions", store_a / "registrations.json", "--group", "G_TAG_ALL",
        "--topic", "TopicTest", "--queue-id", 0, "--queue-offset", 3, "--since", SECONDS)])
    out, err = capsys.readouterr()
    assert (code, out, err) == (2, "", f"error: --since: {HINT} (python -m jobs.explain --help)\n")


@pytest.mark.spark
def test_the_data_source_refuses_epoch_seconds(spark, store_a):
    from jobs.datasource import register

    register(spark)
    with pytest.raises(Exception, match=re.escape(f"until: {HINT}")):
        spark.read.format("rocketmq").option("until", SECONDS).load(str(store_a / "store")).count()
