"""PLY grammar of RocketMQ's SelectorParser.jj, plus JavaCC's habit of ignoring trailing input.

The JavaCC grammar is stratified (or > and > equality > comparison > unary) and BETWEEN bounds are
unary expressions only, so the rules below are layered the same way instead of using a precedence
table; the LALR tables then have no conflicts and every tree matches RocketMQ's. Each p_ rule only
calls a factory from build.py, which applies RocketMQ's build-time checks.

JmsSelector() has no <EOF>: the generated parser returns as soon as the token after a complete
expression cannot continue it, and never looks further. `selector_tokens` reproduces that cut
before the tokens reach the LALR parser (see its docstring).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ply import lex, yacc

from . import build
from .errors import FilterSyntaxError
from .lexer import SelectorLexer
from .nodes import Node


def _rule(grammar):
    """Attach a production to a p_ function without relying on docstrings (which -OO strips)."""
    def attach(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__doc__ = grammar
        return fn
    return attach


# Tokens that JavaCC's loops in comparisonExpression .. orExpression accept after an operand with
# one token of lookahead (NOT and IS enter the loop before their two-token check, so they commit).
_CONTINUES = frozenset((
    "OR", "AND", "EQ", "NE", "IS", "NOT", "GT", "GE", "LT", "LE", "BETWEEN", "IN",
    "CONTAINS", "STARTSWITH", "ENDSWITH",
))
# Tokens that can be the last one of an operand or of a complete comparison.
_ENDS_OPERAND = frozenset((
    "ID", "STRING_LITERAL", "DECIMAL_LITERAL", "FLOATING_POINT_LITERAL", "TRUE", "FALSE", "NULL", "RPAREN",
))


def selector_tokens(lexer: SelectorLexer, text: str) -> tuple[list[lex.LexToken], int | None]:
    """The tokens JavaCC's SelectorParser consumes from `text`, lexed lazily like its token manager.

    After an operand at parenthesis depth 0, a token that no enclosing loop accepts ends the parse:
    JavaCC returns the expression read so far and never lexes the rest (so `a = 'x' "junk` is
    accepted but `a = 'x' && b` is a token error: `&` is the token it peeks at). If the prefix is not
    a complete expression at that point (e.g. `a between 1 x`), JavaCC fails there, and so does
    the LALR parse of the same prefix.

    Returns (tokens, cut): cut is the offset in `text` where the ignored input starts, None when
    every token was read.
    """
    lexer.input(text)
    result: list[lex.LexToken]
    result, depth, previous = [], 0, None
    while True:
        tok = lexer.token()
        if tok is None:
            return result, None
        if depth == 0 and previous in _ENDS_OPERAND and tok.type not in _CONTINUES:
            return result, tok.lexpos
        if tok.type == "LPAREN":
            depth += 1
        elif tok.type == "RPAREN":
            depth -= 1
        result.append(tok)
        previous = tok.type


class SelectorParser:
    """LALR(1) parser producing nodes.Node trees; call build() once, then parse(tokens)."""

    tokens = SelectorLexer.tokens
    start = "selector"

    def __init__(self) -> None:
        self.parser: Any = None  # a ply LRParser once built

    def build(self, errorlog: Any = None, debuglog: Any = None) -> SelectorParser:
        """Build the tables in memory: no parsetab.py, no parser.out, nothing written anywhere.

        PLY reports grammar conflicts only in debug mode, so a `debuglog` (kept in memory, never a
        parser.out file) turns debug mode on; tests use it to check the grammar has no conflicts.
        """
        self.parser = yacc.yacc(
            module=self, start=self.start, debug=debuglog is not None, debuglog=debuglog,
            write_tables=False, optimize=False, tabmodule="_sql92_tables_are_never_written",
            errorlog=errorlog or yacc.NullLogger())
        return self

    def parse(self, tokens: Iterable[lex.LexToken]) -> Node:
        stream = iter(tokens)
        return self.parser.parse(lexer=_NO_LEXER, tokenfunc=lambda: next(stream, None))

    @_rule("selector : or_expr")
    def p_selector(self, p: yacc.YaccProduction) -> None:
        p[0] = build.as_boolean(p[1])

    @_rule("or_expr : or_expr OR and_expr")
    def p_or_expr(self, p: yacc.YaccProduction) -> None:
        p[0] = build.logical_or(p[1], p[3])

    @_rule("""or_expr : and_expr
              and_expr : equality_expr
              equality_expr : comparison_expr
              comparison_expr : unary_expr
              unary_expr : primary_expr
              primary_expr : literal""")
    def p_single(self, p: yacc.YaccProduction) -> None:
        p[0] = p[1]

    @_rule("unary_expr : PLUS unary_expr")
    def p_unary_plus(self, p: yacc.YaccProduction) -> None:
        p[0] = p[2]  # unary plus builds nothing: `+5` is the constant 5 itself, checks included

    @_rule("primary_expr : LPAREN or_expr RPAREN")
    def p_primary_group(self, p: yacc.YaccProduction) -> None:
        p[0] = p[2]

    @_rule("and_expr : and_expr AND equality_expr")
    def p_and_expr(self, p: yacc.YaccProduction) -> None:
        p[0] = build.logical_and(p[1], p[3])

    @_rule("equality_expr : equality_expr EQ comparison_expr")
    def p_equality_eq(self, p: yacc.YaccProduction) -> None:
        p[0] = build.equal(p[1], p[3])

    @_rule("equality_expr : equality_expr NE comparison_expr")
    def p_equality_ne(self, p: yacc.YaccProduction) -> None:
        p[0] = build.not_equal(p[1], p[3])

    @_rule("equality_expr : equality_expr IS NULL")
    def p_equality_is_null(self, p: yacc.YaccProduction) -> None:
        p[0] = build.is_null(p[1])

    @_rule("equality_expr : equality_expr IS NOT NULL")
    def p_equality_is_not_null(self, p: yacc.YaccProduction) -> None:
        p[0] = build.is_not_null(p[1])

    @_rule("""comparison_expr : comparison_expr GT unary_expr
                              | comparison_expr GE unary_expr
                              | comparison_expr LT unary_expr
                              | comparison_expr LE unary_expr""")
    def p_comparison_order(self, p: yacc.YaccProduction) -> None:
        p[0] = build.compare(p[2], p[1], p[3])

    @_rule("""comparison_expr : comparison_expr CONTAINS STRING_LITERAL
                              | comparison_expr STARTSWITH STRING_LITERAL
                              | comparison_expr ENDSWITH STRING_LITERAL""")
    def p_comparison_match(self, p: yacc.YaccProduction) -> None:
        p[0] = build.string_match(p.slice[2].type.lower(), p[1], p[3], False)

    @_rule("""comparison_expr : comparison_expr NOT CONTAINS STRING_LITERAL
                              | comparison_expr NOT STARTSWITH STRING_LITERAL
                              | comparison_expr NOT ENDSWITH STRING_LITERAL""")
    def p_comparison_not_match(self, p: yacc.YaccProduction) -> None:
        p[0] = build.string_match(p.slice[3].type.lower(), p[1], p[4], True)

    @_rule("comparison_expr : comparison_expr BETWEEN unary_expr AND unary_expr")
    def p_comparison_between(self, p: yacc.YaccProduction) -> None:
        p[0] = build.between(p[1], p[3], p[5])

    @_rule("comparison_expr : comparison_expr NOT BETWEEN unary_expr AND unary_expr")
    def p_comparison_not_between(self, p: yacc.YaccProduction) -> None:
        p[0] = build.not_between(p[1], p[4], p[6])

    @_rule("comparison_expr : comparison_expr IN LPAREN string_list RPAREN")
    def p_comparison_in(self, p: yacc.YaccProduction) -> None:
        p[0] = build.in_list(p[1], p[4], False)

    @_rule("comparison_expr : comparison_expr NOT IN LPAREN string_list RPAREN")
    def p_comparison_not_in(self, p: yacc.YaccProduction) -> None:
        p[0] = build.in_list(p[1], p[5], True)

    @_rule("string_list : STRING_LITERAL")
    def p_string_list_first(self, p: yacc.YaccProduction) -> None:
        p[0] = [p[1]]

    @_rule("string_list : string_list COMMA STRING_LITERAL")
    def p_string_list_more(self, p: yacc.YaccProduction) -> None:
        p[1].append(p[3])
        p[0] = p[1]

    @_rule("unary_expr : MINUS unary_expr")
    def p_unary_minus(self, p: yacc.YaccProduction) -> None:
        p[0] = build.negate(p[2])

    @_rule("unary_expr : NOT unary_expr")
    def p_unary_not(self, p: yacc.YaccProduction) -> None:
        p[0] = build.logical_not(p[2])

    @_rule("primary_expr : ID")
    def p_primary_property(self, p: yacc.YaccProduction) -> None:
        p[0] = build.Property(p[1])

    @_rule("literal : STRING_LITERAL")
    def p_literal_string(self, p: yacc.YaccProduction) -> None:
        p[0] = build.Constant(p[1])

    @_rule("literal : DECIMAL_LITERAL")
    def p_literal_decimal(self, p: yacc.YaccProduction) -> None:
        p[0] = build.decimal_literal(p[1])

    @_rule("literal : FLOATING_POINT_LITERAL")
    def p_literal_float(self, p: yacc.YaccProduction) -> None:
        p[0] = build.float_literal(p[1])

    @_rule("""literal : TRUE
                      | FALSE
                      | NULL""")
    def p_literal_keyword(self, p: yacc.YaccProduction) -> None:
        p[0] = {"TRUE": build.TRUE, "FALSE": build.FALSE, "NULL": build.NULL}[p.slice[1].type]

    def p_error(self, tok: lex.LexToken | None) -> None:
        if tok is None:
            raise FilterSyntaxError("unexpected end of selector")
        raise FilterSyntaxError(f"unexpected {tok.type} {tok.value!r}", tok.lexpos)


class _NoLexer:
    """PLY wants a lexer object even when tokens come from tokenfunc; this one is never read."""


_NO_LEXER = _NoLexer()
