"""A broker's own registration wins for that broker: a subscriptions file written from broker-a's registrations
(its bornTimes) on a run of both brokers must not give broker-b's late SQL92 group broker-a's bornTime. The store's
config/consumerFilter.json bornTime of the same expression is kept (the broker's, which its bitmaps follow), the
file's is ignored with a warning, and explain says where the bornTime it used came from."""
import json

import pyarrow.dataset as ds

from jobs.explain.text import _subscription
from jobs.output.layouts import NORMALIZED
from jobs.output.writers import SinkSpec, commit
from jobs.plan.brokers import brokers_of
from jobs.plan.cluster import plan_cluster
from jobs.settings import JobOptions
from jobs.task import stage as T
from tests.jobs.test_cluster import _assert_matches, _stores

# broker-a's registrations.json of the fixture, by hand: the bornTime broker-a's broker gave each SQL92 group
BROKER_A_BORN = {("GC_SQL_AMOUNT", "TopicOrder"): 1795585953523, ("GC_SQL_REGION", "TopicOrder"): 1795585953544,
                 ("GC_SQL_PAY", "TopicPay"): 1795585953546, ("GC_SQL_LATE_B", "TopicOrder"): 1795585953546,
                 ("GC_SQL_LATE_B", "TopicPay"): 1795585953546}
BROKER_B_LATE = 1795585953846  # broker-b/registrations.json: GC_SQL_LATE_B, registered late on broker-b


def _broker_a_file(cluster, tmp_path):
    subs = json.loads((cluster / "registrations.json").read_text(encoding="utf-8"))
    for g in subs["groups"]:
        if (g["group"], g["topic"]) in BROKER_A_BORN:
            g["bornTime"] = BROKER_A_BORN[(g["group"], g["topic"])]
    path = tmp_path / "broker-a-registrations.json"
    path.write_text(json.dumps(subs), encoding="utf-8")
    return path


def test_broker_a_s_born_times_do_not_override_broker_b_s_own(store_cluster, tmp_path):
    options = JobOptions(store=str(store_cluster / "broker-a" / "store"),
                         subscription_files=(str(_broker_a_file(store_cluster, tmp_path)),))
    planned = plan_cluster(options, brokers_of(_stores(store_cluster)))
    late = {b.name: [c.sub for c in p.plan.subscriptions  # the SQL92 ones (its retry topic: TAG *)
                     if c.sub.group == "GC_SQL_LATE_B" and c.sub.expression_type == "SQL92"] for b, p in planned.parts}
    assert {(s.born_time, s.born_from) for s in late["broker-b"]} == {(BROKER_B_LATE, "config/consumerFilter.json")}
    warnings = {b.name: p.warnings for b, p in planned.parts}
    assert [w for w in warnings["broker-b"] if w.startswith("broker broker-b: GC_SQL_LATE_B/TopicPay: bornTime "
                                                            "1795585953546 of ") and "at 1795585953846" in w]
    assert not [w for w in warnings["broker-a"] if "bornTime" in w]  # the file's are broker-a's own
    plans = [p.plan for _, p in planned.parts]
    (tmp_path / "out").mkdir()  # the temporary OUT, made by the run's claim
    spec = SinkSpec(str(tmp_path / "out"), NORMALIZED, True)
    reports = T.replay(T.in_process, plans, spec, T.broker_splits(T.in_process, plans))
    commit(str(tmp_path / "out"), reports)
    rows = ds.dataset(tmp_path / "out" / "matched", format="parquet").to_table().to_pylist()
    _assert_matches(rows, store_cluster / "expected_cluster.json")  # each broker's own read path


def test_explain_names_where_the_born_time_came_from():
    stored = {"type": "SQL92", "expression": "a > 1", "stored": True, "born_time": 5, "born_from":
              "config/consumerFilter.json", "bloom_bits": [1], "retry_rule": None, "warning": None}
    assert "  bornTime 5 (from config/consumerFilter.json), bloom bits [1]" in _subscription(stored)
    adhoc = {**stored, "stored": False, "born_time": None, "born_from": None}
    assert "  no bornTime (registered before the first message), bloom bits [1]" in _subscription(adhoc)
