"""Named SQL92 behaviours RocketMQ shows in the vectors, plus the packaging rules of the module."""
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from filtering import sql92
from filtering.sql92 import java
from tests.filtering.sql92_oracle import expected, mismatch, outcome, vector

PACKAGE = Path(sql92.__file__).resolve().parent
TABLE_FILES = {"parsetab.py", "parser.out", "lextab.py", "parsetab.pyc"}


def agrees(vector_id, dialect="5"):
    """Assert the project reproduces RocketMQ on one vector; returns the vector for extra checks."""
    v = vector(vector_id)
    assert mismatch(v, dialect) is None, mismatch(v, dialect)
    return v


def test_trailing_input_is_ignored():
    for vector_id in ("A-002201", "A-002215", "A-002214", "A-002212"):  # a = 'x') / a = 1e / 1.2.3 / 0x10
        v = agrees(vector_id)
        assert expected(v, "5")[0] == "value"
    assert sql92.parse("a = 'x' b = 'y' \"junk").evaluate({"a": "x"}) is True  # the junk is never lexed


def test_a_bad_token_right_after_the_expression_is_still_a_token_error():
    v = agrees("A-002198")  # a = 'x' && b = 'y': JavaCC peeks at `&`
    assert v["error"] == "parse" and v["error_cause"] == "TokenMgrError"


def test_4x_dialect_reads_startswith_as_trailing_input():
    v = vector("A-000002")  # value startswith 'x'
    assert v["rocketmq_4_9_8"]["error"] is None
    assert mismatch(vector("A-000010"), "4") is None  # 4.9.8: `value` alone -> null
    assert outcome("value startswith 'x'", {"value": "xyz"}, "4") == ("value", False, "Boolean")
    assert outcome("value startswith 'x'", {"value": "xyz"}, "5") == ("value", True, "Boolean")


def test_between_with_low_above_high_is_a_syntax_error():
    for vector_id in ("A-000095", "A-002206"):
        v = agrees(vector_id)
        assert v["error"] == "parse"
    with pytest.raises(sql92.FilterSyntaxError):
        sql92.parse("a between 10 and 0")
    assert sql92.parse("a not between 10 and 0").evaluate({"a": "5"}) is True  # no check on NOT BETWEEN


def test_literal_only_order_comparisons_are_syntax_errors():
    for vector_id in ("A-000889", "A-000890", "A-000908", "A-000945", "A-000935", "A-000939", "A-000097"):
        assert agrees(vector_id)["error"] == "parse"


def test_missing_property_equality_is_asymmetric():
    left, right, both = agrees("A-000958"), agrees("A-000982"), agrees("A-000988")
    assert (left["expr"], left["result"]) == ("a = 'x'", None)
    assert (right["expr"], right["result"]) == ("'x' <> a", True)
    assert (both["expr"], both["result"]) == ("a = b", True)


def test_numeric_comparison_parses_the_string_with_the_literal_type():
    rows = [v for v in sql92_vectors() if v["source"] == "edge:numeric_string_prop"]
    assert any(v["error"] == "RuntimeException" for v in rows)
    assert not [m for m in (mismatch(v, "5") for v in rows) if m]
    e = sql92.parse("a > 5")
    with pytest.raises(sql92.FilterEvaluationError) as info:
        e.evaluate({"a": "10.5"})
    assert info.value.java_class == "RuntimeException"
    assert e.matches({"a": "10.5"}) is False


def test_boolean_against_string_is_a_class_cast_exception():
    v = agrees("A-001275")  # NOT a = 'x'
    assert v["error"] == "ClassCastException"
    with pytest.raises(sql92.FilterEvaluationError) as info:
        sql92.parse(v["expr"]).evaluate(v["props"])
    assert info.value.java_class == "ClassCastException"


def test_short_circuit_hides_errors_on_the_right():
    for vector_id in ("A-001438", "A-001457", "A-001487", "A-001444"):
        assert agrees(vector_id)["error"] is None
    assert agrees("A-001437")["error"] == "RuntimeException"  # the same error on the left counts


def test_bare_property_is_false_for_every_string():
    assert sql92.parse("a").evaluate({"a": "true"}) is False
    assert sql92.parse("a").evaluate({}) is None
    assert sql92.parse("a").evaluate({"a": True}) is True  # only a java.lang.Boolean is a condition


def test_keywords_are_case_insensitive_and_properties_are_not():
    for vector_id in ("A-002166", "A-002168", "A-002170", "A-002182", "A-002183"):
        agrees(vector_id)


def test_comments_and_line_breaks():
    for vector_id in ("A-002172", "A-002177", "A-002178", "A-002179", "A-002180", "A-002181", "A-000898"):
        agrees(vector_id)


@pytest.mark.parametrize("dialect", ["5", "4"])
def test_5000_nested_parentheses_parse_and_evaluate_like_rocketmq(dialect):
    v = vector("A-002262")
    assert v["expr"].startswith("(" * 5000) and (v["result"], v["broker_match"]) == (True, True)
    e = sql92.parse(v["expr"], dialect=dialect)
    assert e.evaluate(v["props"]) is True
    assert e.matches_batch(_maps([v["props"], {"a": "2"}, {}])).tolist() == [True, False, False]


def test_deep_not_chains_and_long_or_chains_evaluate():
    for vector_id in ("A-002260", "A-002255", "A-002257"):
        agrees(vector_id)
    deep = sql92.parse("NOT " * 6000 + "(a = 1)")
    assert deep.evaluate({"a": "1"}) is True and deep.evaluate({}) is None
    assert deep.matches({"a": "x"}) is False  # NumberFormatException inside 6000 NOTs
    assert deep.matches_batch(_maps([{"a": "1"}, {"a": "2"}, {}])).tolist() == [True, False, False]
    limit = sys.getrecursionlimit()
    deep.evaluate({"a": "1"})
    assert sys.getrecursionlimit() == limit  # raised only while evaluating


def test_expression_is_picklable():
    texts = ("a between 10 and 40", "TAGS in ('TagA', 'TagB') and b not contains 'x'", "NOT " * 3000 + "a")
    for text in texts:
        e = sql92.parse(text, dialect="4" if "contains" not in text else "5")
        e.evaluate({"a": "20"})  # a compiled expression must pickle too
        clone = pickle.loads(pickle.dumps(e))
        assert (clone.text, clone.dialect) == (e.text, e.dialect)
        if len(text) < 100:  # comparing deep trees would recurse
            assert clone.tree == e.tree
        for props in ({"a": "20"}, {"a": "x"}, {}, {"TAGS": "TagA", "b": "y"}):
            assert _outcome(clone, props) == _outcome(e, props)


def test_properties_lists_the_names_read():
    e = sql92.parse("a > 5 and (TAGS in ('x') or b is null) and a < 9")
    assert set(e.properties) == {"a", "TAGS", "b"}
    assert tuple(sql92.parse("TRUE").properties) == ()


def test_unknown_dialect_is_a_value_error():
    for dialect in ("3", "develop", "", None, "5 "):
        with pytest.raises(ValueError):
            sql92.parse("a = 1", dialect=dialect)
    assert issubclass(sql92.FilterSyntaxError, ValueError)


def test_syntax_errors_carry_a_position():
    with pytest.raises(sql92.FilterSyntaxError) as info:
        sql92.parse("a = 'x' AND )")
    assert info.value.position == len("a = 'x' AND ")


def test_java_number_parsing_follows_the_jdk():
    # the cases named in fixtures/README.md "Semantics observed"
    assert java.double_value_of(" 5") == 5.0 and java.double_value_of("5d") == 5.0
    assert java.double_value_of("1e400") == float("inf") and java.double_value_of("0x1p3") == 8.0
    assert java.double_value_of("NaN") != java.double_value_of("NaN")
    assert java.integer_value_of("+5") == 5 and java.integer_value_of("١٢") == 12
    for bad in (" 5", "2147483648", "10.5", "", "+", "1_000"):
        with pytest.raises(java.NumberFormatError):
            java.integer_value_of(bad)
    for bad in ("1_000", "١٢", "0x10", "1e", ".", "NaNd"):
        with pytest.raises(java.NumberFormatError):
            java.double_value_of(bad)
    assert java.double_compare(float("nan"), float("inf")) == 1 and java.double_compare(-0.0, 0.0) == -1


def _run_isolated(tmp_path, pythonpath, code, *flags):
    env = dict(os.environ, PYTHONPATH=str(pythonpath), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


_SMOKE = (
    "import filtering.sql92 as s, sys\n"
    "print(s.__file__)\n"
    "assert s.parse(\"a between 10 and 40\").evaluate({'a': '15'}) is True\n"
    "assert s.parse(\"b contains 'x'\", '5').matches({'b': 'axb'})\n"
    "assert s.parse(\"b contains 'x'\", '4').evaluate({'b': 'axb'}) is False\n"
)


def test_parser_writes_no_table_files(tmp_path):
    copy = tmp_path / "src"
    (copy / "filtering" / "sql92").mkdir(parents=True)
    (copy / "filtering" / "__init__.py").write_text("")
    for source in PACKAGE.glob("*.py"):
        (copy / "filtering" / "sql92" / source.name).write_bytes(source.read_bytes())
    run = _run_isolated(tmp_path, copy, _SMOKE)
    assert run.returncode == 0, run.stderr
    assert str(copy) in run.stdout
    assert run.stderr == ""  # PLY's warnings and debug output are silenced
    written = {p.name for p in tmp_path.rglob("*")} & TABLE_FILES
    assert not written
    assert not {p.name for p in PACKAGE.iterdir()} & TABLE_FILES


def test_works_when_imported_from_a_zip(tmp_path):
    archive = tmp_path / "deps.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("filtering/__init__.py", "")
        for source in PACKAGE.glob("*.py"):
            z.write(source, f"filtering/sql92/{source.name}")
    run = _run_isolated(tmp_path, archive, _SMOKE)
    assert run.returncode == 0, run.stderr
    assert "deps.zip" in run.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deps.zip"]


def test_grammar_does_not_depend_on_docstrings(tmp_path):
    """PLY reads productions from docstrings, which python -OO strips; ours are attached explicitly."""
    run = _run_isolated(tmp_path, PACKAGE.parent.parent, _SMOKE, "-OO")
    assert run.returncode == 0, run.stderr


def test_lexers_and_parser_are_built_once_per_process():
    import filtering.sql92 as module
    sql92.parse("a = 1", "4")
    sql92.parse("a = 2", "5")
    lexers, parser = dict(module._lexers), module._parser[0]
    sql92.parse("b = 3", "4")
    sql92.parse("b = 4", "5")
    assert module._lexers == lexers and module._parser == [parser] and set(lexers) == {"4", "5"}


def test_grammar_has_no_conflicts(tmp_path, monkeypatch):
    from ply import yacc

    from filtering.sql92.parser import SelectorParser, _rule

    class Log:
        def __init__(self):
            self.messages = []

        def warning(self, msg, *args):
            self.messages.append(msg % args)

        error = critical = warning

        def info(self, msg, *args):
            pass

        debug = info

    class Ambiguous(SelectorParser):
        @_rule("unary_expr : unary_expr MINUS unary_expr")
        def p_ambiguous(self, p):
            p[0] = p[1]

    monkeypatch.chdir(tmp_path)
    log, control = Log(), Log()
    SelectorParser().build(errorlog=log, debuglog=yacc.NullLogger())
    Ambiguous().build(errorlog=control, debuglog=yacc.NullLogger())
    assert not log.messages
    assert any("conflict" in m for m in control.messages)  # the check does see conflicts
    assert list(tmp_path.iterdir()) == []


def _outcome(e, props):
    try:
        return ("value", e.evaluate(props))
    except sql92.FilterEvaluationError as x:
        return ("error", x.java_class)


def _maps(rows):
    import pyarrow as pa
    return pa.array([list(r.items()) for r in rows], type=pa.map_(pa.string(), pa.string()))


def sql92_vectors():
    from tests.filtering.sql92_oracle import VECTORS
    return VECTORS
