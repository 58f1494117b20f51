"""Reading the SQL92 reference vectors and comparing the project's outcome with RocketMQ's."""
import math

from filtering import sql92
from tests.conftest import read_jsonl

VECTORS = read_jsonl("sql92/vectors.jsonl.gz")
BY_ID = {v["id"]: v for v in VECTORS}
DIALECTS = ("5", "4")


def string_typed(v):
    """True when RocketMQ saw every property as a String, as a broker does."""
    return all(t == "String" for t in (v.get("prop_types") or {}).values())


def expected(v, dialect):
    """RocketMQ's outcome for a vector: ("parse",), ("error", class), or ("value", result, type)."""
    want = dict(v, **v["rocketmq_4_9_8"]) if dialect == "4" and v.get("rocketmq_4_9_8") else v
    if want.get("error") == "parse":
        return ("parse",)
    if want.get("error"):
        return ("error", want["error"])
    return ("value", want.get("result"), want.get("result_type"))


def broker_match(v, dialect):
    """The broker's decision: recorded for develop; for 4.9.8 it is "returned exactly TRUE"."""
    if dialect == "4" and v.get("rocketmq_4_9_8"):
        return v["rocketmq_4_9_8"].get("error") is None and v["rocketmq_4_9_8"].get("result") is True
    return bool(v["broker_match"])


def outcome(expr, props, dialect):
    """The project's outcome, in the shape of expected()."""
    try:
        e = sql92.parse(expr, dialect=dialect)
    except sql92.FilterSyntaxError:
        return ("parse",)
    try:
        r = e.evaluate(props)
    except sql92.FilterEvaluationError as x:
        return ("error", x.java_class)
    java_type = {bool: "Boolean", type(None): "null", int: "Integer", float: "Double", str: "String"}
    return ("value", r, java_type.get(type(r), type(r).__name__))


def same(got, want):
    """Outcomes agree; values must have the Java type too (True is not 1, NaN equals NaN)."""
    if got[0] != want[0]:
        return False
    if got[0] != "value":
        return got == want
    g, w = got[1], want[1]
    if isinstance(w, bool) or w is None:
        return g is w
    if isinstance(w, float) and math.isnan(w):
        return isinstance(g, float) and math.isnan(g)
    return g == w and got[2] == want[2]


def mismatch(v, dialect, props=None):
    """None when the project agrees with RocketMQ on this vector, else a short description."""
    props = v["props"] if props is None else props
    want = expected(v, dialect)
    got = outcome(v["expr"], props, dialect)
    if not same(got, want):
        return f"{v['id']} [{dialect}] {v['expr'][:80]!r} {props!r:.80}: got {got!r:.80}, want {want!r:.80}"
    if want[0] != "parse":
        decision = sql92.parse(v["expr"], dialect=dialect).matches(props)
        if decision is not broker_match(v, dialect):
            return f"{v['id']} [{dialect}] matches() gave {decision}, broker {broker_match(v, dialect)}"
    return None


def vector(vector_id):
    return BY_ID[vector_id]
