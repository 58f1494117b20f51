"""OpenLineage run events through the standard client and its own configuration: the file transport
(OPENLINEAGE_CONFIG) and the HTTP one (OPENLINEAGE_URL, a server on 127.0.0.1 started here); none
configured, none sent and nothing said. Without Spark: the events of a run that fails before Spark starts
come from the job's main(); a whole run's START and COMPLETE are checked in test_replay_spark.py."""
import http.server
import json
import threading

import pytest

from jobs import replay
from jobs.report.lineage import Lineage, configured, dataset_of

SUMMARY = {"totals": {"units": 17547},
           "outputs": {"matched": {"files": 5, "rows": 5109, "bytes": 109186},
                       "messages": {"files": 33, "rows": 2509, "bytes": 2483705}}}


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in ("OPENLINEAGE_CONFIG", "OPENLINEAGE_URL", "OPENLINEAGE_DISABLED", "OPENLINEAGE_NAMESPACE",
                 "MQREPLAY_RUN", "MQREPLAY_LOG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MQREPLAY_LOG", str(tmp_path / "logs"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.openlineage/openlineage.yml of the machine's
    monkeypatch.chdir(tmp_path)  # nor an openlineage.yml in the working directory
    return monkeypatch


def _file_transport(monkeypatch, tmp_path):
    events = tmp_path / "events.jsonl"
    config = tmp_path / "openlineage.yml"
    config.write_text(f"transport:\n  type: file\n  log_file_path: {events}\n  append: true\n", encoding="utf-8")
    monkeypatch.setenv("OPENLINEAGE_CONFIG", str(config))
    return events


def _read(events):
    return [json.loads(line) for line in events.read_text(encoding="utf-8").splitlines()]


def test_no_configuration_no_client_no_events(clean_env, tmp_path):
    assert not configured()
    assert Lineage.of("1234abcd", ["/s"], "/o") is None


def test_disabled_wins_over_a_url(clean_env):
    clean_env.setenv("OPENLINEAGE_URL", "http://127.0.0.1:9")
    clean_env.setenv("OPENLINEAGE_DISABLED", "true")
    assert not configured()


def test_start_then_complete_name_the_store_and_the_outputs_with_row_counts(clean_env, tmp_path):
    events = _file_transport(clean_env, tmp_path)
    lineage = Lineage.of("1234abcd", [str(tmp_path / "store")], str(tmp_path / "out"))
    lineage.start()
    lineage.complete(SUMMARY)
    start, complete = _read(events)
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert start["run"]["runId"] == complete["run"]["runId"]
    assert start["job"] == complete["job"] and complete["job"]["name"] == "mqreplay.replay"
    assert [(i["namespace"], i["name"]) for i in complete["inputs"]] == [("file", str(tmp_path / "store"))]
    assert complete["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] == 17547
    outputs = {o["name"]: o["outputFacets"]["outputStatistics"] for o in complete["outputs"]}
    assert outputs[str(tmp_path / "out" / "matched")]["rowCount"] == 5109
    assert outputs[str(tmp_path / "out" / "messages")]["size"] == 2483705
    assert [o["name"] for o in start["outputs"]] == [str(tmp_path / "out")]


def test_a_run_that_fails_sends_start_then_fail_with_its_error(clean_env, store_a, tmp_path):
    events = _file_transport(clean_env, tmp_path)
    (tmp_path / "out").mkdir()  # an existing OUT: refused after the run began (exit 2)
    code = replay.main(["--store", str(store_a / "store"), "--out", str(tmp_path / "out"),
                        "--subscriptions", str(store_a / "registrations.json")])
    assert code == 2
    start, fail = _read(events)
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert start["run"]["runId"] == fail["run"]["runId"]
    message = fail["run"]["facets"]["errorMessage"]["message"]
    assert message.startswith("exit 2: ") and "exists" in message
    assert [i["name"] for i in fail["inputs"]] == [str(store_a / "store")]


def test_a_usage_error_before_the_run_sends_nothing(clean_env, tmp_path):
    events = _file_transport(clean_env, tmp_path)
    assert replay.main(["--store", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    assert not events.exists()


class _Collector(http.server.BaseHTTPRequestHandler):
    received = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.path, json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_http_transport_posts_start_and_complete(clean_env, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Collector.received = []
    try:
        clean_env.setenv("OPENLINEAGE_URL", f"http://127.0.0.1:{server.server_address[1]}")
        lineage = Lineage.of("feedc0de", ["s3://bucket/broker-a/store"], "s3://bucket/replay/out")
        lineage.start()
        lineage.complete(SUMMARY)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    posted = [(path, e["eventType"]) for path, e in _Collector.received]
    assert posted == [("/api/v1/lineage", "START"), ("/api/v1/lineage", "COMPLETE")]
    complete = _Collector.received[1][1]
    assert [(i["namespace"], i["name"]) for i in complete["inputs"]] == [("s3://bucket", "/broker-a/store")]
    assert ("s3://bucket", "/replay/out/matched") in [(o["namespace"], o["name"]) for o in complete["outputs"]]


def test_an_unreachable_server_is_a_warning_never_a_failed_run(clean_env, capsys):
    clean_env.setenv("OPENLINEAGE_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    lineage = Lineage.of("feedc0de", ["/s"], "/o")
    lineage.start()
    assert "warning: OpenLineage START event not sent" in capsys.readouterr().err


def test_dataset_names_follow_openlineage_naming():
    assert dataset_of("/data/broker-a/store") == ("file", "/data/broker-a/store")
    assert dataset_of("file:///data/out") == ("file", "/data/out")
    assert dataset_of("hdfs://nn:8020/replay/out") == ("hdfs://nn:8020", "/replay/out")
