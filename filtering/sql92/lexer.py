"""PLY lexer with the token rules of RocketMQ's SelectorParser.jj.

JavaCC picks the longest match, so the rule order below makes Python's first-match regex agree:
comments before `-`, floats before decimals, two-character operators before one-character ones.
Keywords are case-insensitive and found through the identifier rule; the develop dialect adds
CONTAINS, STARTSWITH and ENDSWITH, which are ordinary identifiers in 4.x.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ply import lex
from ply.lex import TOKEN

from .errors import FilterSyntaxError

KEYWORDS_4 = ("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS")
KEYWORDS_5 = KEYWORDS_4 + ("CONTAINS", "STARTSWITH", "ENDSWITH")

_EXPONENT = r"(?:[eE][+-]?[0-9]+)"
_FLOAT = r"(?:[0-9]+\.[0-9]*" + _EXPONENT + r"?|\.[0-9]+" + _EXPONENT + r"?|[0-9]+" + _EXPONENT + ")"


class SelectorLexer:
    """Tokenizer for one dialect; call build() once, then input()/token() like any PLY lexer."""

    tokens = KEYWORDS_5 + (
        "DECIMAL_LITERAL", "FLOATING_POINT_LITERAL", "STRING_LITERAL", "ID",
        "EQ", "NE", "GT", "GE", "LT", "LE", "LPAREN", "RPAREN", "COMMA", "PLUS", "MINUS",
    )

    t_ignore = " \t\n\r\f"

    t_NE = r"<>"
    t_GE = r">="
    t_LE = r"<="
    t_EQ = r"="
    t_GT = r">"
    t_LT = r"<"
    t_LPAREN = r"\("
    t_RPAREN = r"\)"
    t_COMMA = r","
    t_PLUS = r"\+"
    t_MINUS = r"-"

    def __init__(self, keywords: Iterable[str] = KEYWORDS_5) -> None:
        self.keywords = {k: k for k in keywords}
        self.lexer: Any = None  # a ply Lexer once built

    def build(self, **kwargs: Any) -> SelectorLexer:
        """Build the PLY tables from this instance's rules; never writes a lextab file."""
        self.lexer = lex.lex(object=self, optimize=False, debug=False, errorlog=lex.NullLogger(), **kwargs)
        return self

    def input(self, text: str) -> None:
        self.lexer.input(text)

    def token(self) -> lex.LexToken | None:
        return self.lexer.token()

    @TOKEN(r"--[^\n\r]*(?:\r\n|\n|\r)")
    def t_LINE_COMMENT(self, t: lex.LexToken) -> lex.LexToken | None:
        """A line comment needs its line break; without one `--` is two minus signs."""
        return None

    @TOKEN(r"/\*[^*]*\*+(?:[^*/][^*]*\*+)*/")
    def t_BLOCK_COMMENT(self, t: lex.LexToken) -> lex.LexToken | None:
        return None

    @TOKEN(_FLOAT)
    def t_FLOATING_POINT_LITERAL(self, t: lex.LexToken) -> lex.LexToken | None:
        return t

    @TOKEN(r"(?:0|[1-9][0-9]*[lL]?)")
    def t_DECIMAL_LITERAL(self, t: lex.LexToken) -> lex.LexToken | None:
        return t

    @TOKEN(r"'(?:''|[^'])*'")
    def t_STRING_LITERAL(self, t: lex.LexToken) -> lex.LexToken | None:
        t.value = t.value[1:-1].replace("''", "'")
        return t

    @TOKEN(r"[a-zA-Z_$][a-zA-Z0-9_$]*")
    def t_ID(self, t: lex.LexToken) -> lex.LexToken | None:
        t.type = self.keywords.get(t.value.upper(), "ID")
        return t

    def t_error(self, t: lex.LexToken) -> None:
        raise FilterSyntaxError(f"lexical error at {t.value[:1]!r}", t.lexpos)
