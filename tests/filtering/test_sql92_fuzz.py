"""Random strings and mutated selectors into the SQL92 parser and evaluator: only the project's own
error types come out, and nothing hangs."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from filtering import sql92

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEEDS = ["a between 10 and 40", "TAGS is not null and TAGS in ('TagA', 'TagC')", "nosuch = 'x' OR (price > 900.5)",
         "NOT (a <> 'b') AND c STARTSWITH 'x'", "a >= 1.5e3 or b = TRUE -- c", "(((a)))", "x IS NOT NULL /* c */"]
WORDS = ["AND", "OR", "NOT", "IN", "IS", "NULL", "BETWEEN", "TRUE", "CONTAINS", "'", "--", "/*"]
ALPHABET = st.sampled_from(list("ab()'=<>!-+.*/,eE019 \t\n") + WORDS)


def _parse_and_evaluate(text, dialect):
    try:
        expr = sql92.parse(text, dialect=dialect)
    except sql92.FilterSyntaxError:
        return
    for props in ({}, {"a": "5", "b": "x", "c": "xyz", "price": "1e400", "TAGS": "TagA"}):
        try:
            expr.evaluate(props)
        except sql92.FilterEvaluationError:
            pass
        assert expr.matches(props) in (True, False)


@FUZZ
@given(st.text(max_size=80), st.sampled_from(["4", "5"]))
def test_random_text_gives_only_filter_errors(text, dialect):
    _parse_and_evaluate(text, dialect)


@FUZZ
@given(st.lists(ALPHABET, max_size=30), st.sampled_from(["4", "5"]))
def test_random_token_soup_gives_only_filter_errors(tokens, dialect):
    _parse_and_evaluate(" ".join(tokens), dialect)


@FUZZ
@given(st.sampled_from(SEEDS), st.data())
def test_mutated_selectors_give_only_filter_errors(seed, data):
    text = list(seed)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text) - 1))
        text[i] = data.draw(st.characters(codec="utf-8"))
    _parse_and_evaluate("".join(text), "5")


def test_deep_nesting_of_operators_neither_hangs_nor_overflows():
    for text in ("(" * 5000 + "a = 'x'" + ")" * 5000, "NOT " * 3000 + "a = 'x'", " OR ".join(["a = 'x'"] * 3000)):
        expr = sql92.parse(text)
        expr.matches({"a": "x"})
