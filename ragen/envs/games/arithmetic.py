"""A small, safe parser for arithmetic answers (never ``eval``), with exact fractions.

Grammar (usual precedence, left-associative)::

    answer := expr [ "=" INTEGER ]        # a trailing "= 24" claim is allowed and ignored
    expr   := term   (("+" | "-") term)*
    term   := factor (("*" | "/") factor)*
    factor := INTEGER | "(" expr ")" | "-" factor   # unary minus only if allowed

Integers are non-negative literals. Operators are ``+ - * /`` plus the Unicode signs
``×`` ``÷`` ``−`` (a letter ``x`` is not read as a product). Input longer than
``MAX_LENGTH`` characters is rejected (it bounds recursion depth and number size).

    >>> evaluate("(3 + 5) * 2 / 4").value
    Fraction(4, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

MAX_LENGTH = 256
_UNICODE_OPS = {"×": "*", "÷": "/", "−": "-", "–": "-"}


class ExpressionError(ValueError):
    """The text is not a well-formed expression (a syntax problem)."""


@dataclass(frozen=True)
class Expression:
    """A parsed answer.

    Attributes:
        text: the expression text that was parsed (without any ``= N`` claim).
        numbers: the integer literals in order of appearance.
        value: the exact value, or None when evaluation divides by zero.
    """

    text: str
    numbers: tuple[int, ...]
    value: Fraction | None

    @property
    def divides_by_zero(self) -> bool:
        return self.value is None


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = _UNICODE_OPS.get(text[i], text[i])
        if ch.isspace():
            i += 1
        elif ch in "+-*/()=":
            tokens.append(ch)
            i += 1
        elif "0" <= ch <= "9":
            j = i
            while j < n and "0" <= text[j] <= "9":
                j += 1
            tokens.append(text[i:j])
            i = j
        else:
            raise ExpressionError(f"unexpected character {text[i]!r} at position {i}")
    return tokens


class _Parser:
    def __init__(self, tokens: list[str], allow_unary_minus: bool) -> None:
        self.tokens = tokens
        self.pos = 0
        self.allow_unary_minus = allow_unary_minus
        self.numbers: list[int] = []
        self.zero_division = False

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise ExpressionError("expression ends too early")
        self.pos += 1
        return tok

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.factor()
            if op == "*":
                value = value * rhs
            elif rhs == 0:
                # keep parsing (the syntax may still be wrong) but remember the failure
                self.zero_division = True
                value = Fraction(0)
            else:
                value = value / rhs
        return value

    def factor(self) -> Fraction:
        tok = self.take()
        if tok.isdigit():
            self.numbers.append(int(tok))
            return Fraction(int(tok))
        if tok == "(":
            value = self.expr()
            if self.take() != ")":
                raise ExpressionError("missing closing parenthesis")
            return value
        if tok == "-":
            if not self.allow_unary_minus:
                raise ExpressionError("unary minus is not allowed; use only binary + - * /")
            return -self.factor()
        raise ExpressionError(f"unexpected {tok!r}; expected a number or '('")


def evaluate(text: str, allow_unary_minus: bool = False) -> Expression:
    """Parse and evaluate ``text``; raises :class:`ExpressionError` on bad syntax.

    Division by zero is not a syntax error: it gives ``Expression.value = None``.
    """
    text = str(text)
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_LENGTH} characters")
    tokens = _tokenize(text)
    if "=" in tokens:
        k = tokens.index("=")
        claim = tokens[k + 1 :]
        if len(claim) != 1 or not claim[0].isdigit():
            raise ExpressionError("after '=' only a single number (the claimed result) may follow")
        tokens = tokens[:k]
        text = text[: text.index("=")].strip()
    if not tokens:
        raise ExpressionError("empty expression")
    parser = _Parser(tokens, allow_unary_minus)
    value = parser.expr()
    if parser.pos != len(tokens):
        raise ExpressionError(f"unexpected {tokens[parser.pos]!r} after a complete expression")
    return Expression(text.strip(), tuple(parser.numbers), None if parser.zero_division else value)
