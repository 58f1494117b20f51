"""explain and jobs.maintain are handed what their command lines ask, made once in jobs/cli.py, never the
argparse namespace."""
from jobs.cli import ExplainRequest, Upkeep, explain_request, parse_explain_args, parse_maintain_args
from jobs.plan.units.choose import UnitsFrom
from jobs.settings import CorruptPolicy
from jobs.sinks.iceberg.tables import CatalogArgs


def test_explain_is_handed_its_question_and_the_options_of_the_run_it_explains():
    request = explain_request(parse_explain_args([
        "--store", "S", "--group", "G", "--topic", "T", "--queue-id", "1", "--queue-offset", "7",
        "--units-from", "commitlog", "--no-retry", "--rocketmq-version", "4"]))
    assert isinstance(request, ExplainRequest)
    assert (request.stores, request.group, request.topic, request.queue_id, request.queue_offset, request.key,
            request.msg_id, request.json) == (("S",), "G", "T", 1, 7, None, None, False)
    assert (request.options.units_from, request.options.on_corrupt, request.options.retry,
            request.options.dialect) == (UnitsFrom.COMMIT_LOG, CorruptPolicy.FAIL, False, "4")


def test_maintain_is_handed_its_steps_and_catalog():
    upkeep = parse_maintain_args(["--catalog-uri", "sqlite:///lake.db", "--warehouse", "W", "--namespace", "ns",
                                  "--compact", "--expire-snapshots-older-than", "7d"])
    assert upkeep == Upkeep(CatalogArgs("ns", None, "sqlite:///lake.db", "W", "5m"), False, True, "7d", "1d")
