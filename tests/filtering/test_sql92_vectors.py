"""Every SQL92 reference vector in both dialects: parse error, result and type, evaluation error, decision."""
import pytest

from filtering.sql92 import java
from tests.filtering.sql92_oracle import DIALECTS, VECTORS, mismatch, string_typed

STRING_VECTORS = [v for v in VECTORS if string_typed(v)]
TYPED_VECTORS = [v for v in VECTORS if not string_typed(v)]


def _report(failures):
    return f"{len(failures)} vectors disagree with RocketMQ:\n" + "\n".join(failures[:40])


def test_vector_file_is_the_expected_one():
    assert len(VECTORS) == 9290 and len(STRING_VECTORS) == 9276


@pytest.mark.parametrize("dialect", DIALECTS)
def test_string_property_vectors_agree_with_rocketmq(dialect):
    failures = [m for m in (mismatch(v, dialect) for v in STRING_VECTORS) if m]
    assert not failures, _report(failures)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("family", [
    "edge:literal_only", "edge:syntax_and_lexical", "edge:numeric_string_prop", "edge:string_equality",
    "edge:three_valued_logic", "edge:contains_startswith_endswith", "ExpressionTest", "ParserTest", "random",
])
def test_every_vector_family_is_covered(family, dialect):
    """The aggregate above, split by family so a regression names the area it is in."""
    cases = [v for v in STRING_VECTORS if v["source"].startswith(family)]
    assert cases
    failures = [m for m in (mismatch(v, dialect) for v in cases) if m]
    assert not failures, _report(failures)


def _java_typed(v):
    """The non-String objects of RocketMQ's unit tests, in the evaluator's value model."""
    convert = {
        "String": str,
        "Integer": int,
        "Long": lambda s: java.Long(int(s)),
        "Double": float,
        "Boolean": lambda s: s == "true",
        "Object": lambda s: object(),
        "null": lambda s: None,
    }
    types = v.get("prop_types") or {}
    return {k: convert[types.get(k, "String")](s) for k, s in v["props"].items()}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_typed_property_vectors_agree_when_values_keep_their_java_type(dialect):
    """RocketMQ's own tests used Integer/Boolean/Object properties; a broker never does, but the row
    evaluator accepts such Python values (int, bool, any other object) and must treat them the same."""
    assert TYPED_VECTORS
    failures = [m for m in (mismatch(v, dialect, _java_typed(v)) for v in TYPED_VECTORS) if m]
    assert not failures, _report(failures)
