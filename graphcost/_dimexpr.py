"""The grammar of a dim expression, parsed without ever evaluating text.

A ``dim_param`` is a string from the model file, so it is attacker-controlled. It used to go through
``sympy.sympify``, which runs Python ``eval``; this module replaces that with a tokenizer and a
recursive-descent parser that builds sympy objects directly. The grammar is what ORT's symbolic shape
inference writes (``floor(H/2 - 1/2) + 1``, ``Max(0, N - 1)``, ``2*batch*seq``)::

    expr   := term (('+' | '-') term)*
    term   := unary (('*' | '/' | '//' | '%') unary)*
    unary  := ('-' | '+') unary | power
    power  := atom (('**' | '^') INT)?            INT ≤ MAX_EXPONENT; no chained powers
    atom   := INT | DECIMAL | NAME | CALL '(' expr (',' expr)* ')' | '(' expr ')'
    CALL   := floor | ceil | ceiling | min | max | Min | Max | Mod

Every limit below bounds the work of the parse *and* of what later code does with the result
(``sympy.expand`` in reports, numeric evaluation under a binding). Text outside the grammar or over a
limit is not an error: :func:`parse` raises :class:`Rejected`, and the caller turns the text into one
opaque symbol.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graphcost._minmax import dim_max, dim_min
from graphcost._sym import sympy

MAX_TEXT = 1024
"""Characters in one dim expression; longer text is never tokenized. ORT writes one nested
``floor(.../2 - 1/2)`` per downsampling layer (about 12 characters each), so deep CNNs and U-Nets with
symbolic H and W need a few hundred."""
MAX_TOKENS = 512
MAX_DEPTH = 64
"""Nesting of parentheses, calls and unary signs (one or two per downsampling layer)."""
MAX_LITERAL = 2**63
"""Largest integer literal (an ONNX dim is an int64)."""
MAX_EXPONENT = 8
MAX_TERMS = 256
"""Upper bound on the monomials of the fully expanded expression (what ``to_text`` prints)."""
MAX_DEGREE = 16
MAX_BITS = 1024
"""Upper bound on the bits of any number the expression can produce from its literals."""



@dataclass(frozen=True)
class Limits:
    """The bounds one parse works under (the module's ``MAX_*``, for a dim from the model file)."""

    text: int = MAX_TEXT
    tokens: int = MAX_TOKENS
    depth: int = MAX_DEPTH
    terms: int = MAX_TERMS
    degree: int = MAX_DEGREE
    bits: int = MAX_BITS


DIM = Limits()
FORMULA = Limits(text=1 << 22, tokens=1 << 20, terms=1 << 20, degree=64, bits=1 << 14)
"""For a formula graphcost wrote itself (``totals.formulas``): one term per monomial of a whole model's count, so
far longer than any dim (SSD300's bytes: 371 data-dependent dims; a dynamic-size ResNet-50's MACs: 1,035
characters), parsed by the same grammar in time linear in the text."""

_TOKEN = re.compile(r"\s*(?:(?P<dec>[0-9]+\.[0-9]*|\.[0-9]+)|(?P<int>[0-9]+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                    r"|(?P<op>\*\*|//|[-+*/%^(),]))")


class Rejected(ValueError):
    """The text is outside the grammar or over a limit (the reason says which)."""


@dataclass(frozen=True)
class _Node:
    """A parsed sub-expression and the bounds on what it costs to expand."""

    expr: Any  # a sympy expression
    terms: int  # monomials after full expansion, an upper bound
    degree: int  # polynomial degree in the dim names, an upper bound
    bits: int  # bits of the largest number it can produce, an upper bound


def _functions() -> dict[str, tuple[Callable[..., Any], int, int]]:
    """Callable names: (what builds the call, fewest args, most args).

    Min and Max are built by :mod:`graphcost._minmax`, which gives sympy's own object without its order search
    where no order exists: onnx-shape-inference writes clamps such as ``Max(0, Min(H, ...))`` into the dims of
    dynamic-size Swin-V2-T, and sympy's search in those was 0.46 s of the 0.49 s spent parsing them (cProfile);
    parsing them took 0.27 s wall that way and 0.06 s this way."""
    return {"floor": (sympy.floor, 1, 1), "ceil": (sympy.ceiling, 1, 1), "ceiling": (sympy.ceiling, 1, 1),
            "min": (dim_min, 1, 16), "Min": (dim_min, 1, 16), "max": (dim_max, 1, 16),
            "Max": (dim_max, 1, 16), "Mod": (sympy.Mod, 2, 2)}


def tokenize(text: str, limits: Limits = DIM) -> list[tuple[str, str]]:
    """(kind, text) pairs, kind one of dec, int, name, op; Rejected on anything else."""
    if len(text) > limits.text:
        raise Rejected(f"longer than {limits.text} characters")
    out: list[tuple[str, str]] = []
    pos = 0
    end = len(text.rstrip())
    while pos < end:
        m = _TOKEN.match(text, pos)
        if m is None or m.lastgroup is None:
            raise Rejected(f"unexpected character {text[pos:].lstrip()[:1]!r}")
        out.append((m.lastgroup, m.group(m.lastgroup)))
        if len(out) > limits.tokens:
            raise Rejected(f"more than {limits.tokens} tokens")
        pos = m.end()
    return out


def parse(text: str, symbol: Callable[[str], Any], limits: Limits = DIM) -> Any:
    """The sympy expression the text denotes; ``symbol(name)`` makes each dim name's symbol.

    Raises Rejected when the text is outside the grammar or over a limit. Nothing is evaluated: names
    become symbols, numbers become sympy numbers, and only the operators of the grammar are applied.
    """
    tokens = tokenize(text, limits)
    if not tokens:
        raise Rejected("empty")
    parser = _Parser(tokens, symbol, limits)
    try:
        node = parser.expr(0)
    except Rejected:
        raise
    except (ArithmeticError, TypeError, ValueError) as e:  # sympy refusing the operands (Mod(N, 0))
        raise Rejected(f"{type(e).__name__}: {e}") from e
    if parser.pos != len(tokens):
        raise Rejected(f"unexpected {tokens[parser.pos][1]!r}")
    expr = node.expr
    if expr.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise Rejected("not finite")
    return expr


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], symbol: Callable[[str], Any], limits: Limits) -> None:
        self.tokens = tokens
        self.pos = 0
        self.symbol = symbol
        self.functions = _functions()
        self.limits = limits

    def _check(self, terms: int, degree: int, bits: int) -> None:
        limits = self.limits
        if terms > limits.terms:
            raise Rejected(f"expands to more than {limits.terms} terms")
        if degree > limits.degree:
            raise Rejected(f"degree above {limits.degree}")
        if bits > limits.bits:
            raise Rejected(f"numbers above {limits.bits} bits")

    # -------------------------------------------------------------- token access
    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _is_op(self, *ops: str) -> str | None:
        tok = self._peek()
        if tok is not None and tok[0] == "op" and tok[1] in ops:
            return tok[1]
        return None

    def _expect(self, op: str) -> None:
        if self._is_op(op) is None:
            tok = self._peek()
            raise Rejected(f"expected {op!r}, found {tok[1] if tok else 'end'!r}")
        self.pos += 1

    # -------------------------------------------------------------- grammar
    def expr(self, depth: int) -> _Node:
        if depth > self.limits.depth:
            raise Rejected(f"nested deeper than {self.limits.depth}")
        left = self.term(depth)
        parts = [left.expr]  # added at once: one sympy Add, not one per term (a formula has hundreds)
        terms, degree, bits = left.terms, left.degree, left.bits
        while (op := self._is_op("+", "-")) is not None:
            self.pos += 1
            right = self.term(depth)
            terms = terms + right.terms
            degree, bits = max(degree, right.degree), max(bits, right.bits) + 1
            self._check(terms, degree, bits)
            parts.append(right.expr if op == "+" else -right.expr)
        if len(parts) == 1:
            return left
        return _Node(sympy.Add(*parts), terms, degree, bits)

    def term(self, depth: int) -> _Node:
        left = self.unary(depth)
        while (op := self._is_op("*", "/", "//", "%")) is not None:
            self.pos += 1
            right = self.unary(depth)
            if op != "*" and right.expr == 0:
                raise Rejected("division by zero")
            # Product and quotient may both expand into every pair of terms; floor and Mod are one atom
            # whose inside is still expanded, so its bounds are checked like a quotient's.
            terms, degree, bits = left.terms * right.terms, left.degree + right.degree, left.bits + right.bits
            self._check(terms, degree, bits)
            if op == "*":
                left = _Node(left.expr * right.expr, terms, degree, bits)
            elif op == "/":
                left = _Node(left.expr / right.expr, terms, degree, bits)
            elif op == "//":
                left = _Node(sympy.floor(left.expr / right.expr), 1, degree, bits)
            else:
                left = _Node(sympy.Mod(left.expr, right.expr), 1, degree, bits)
        return left

    def unary(self, depth: int) -> _Node:
        sign = self._is_op("-", "+")
        if sign is None:
            return self.power(depth)
        if depth + 1 > self.limits.depth:
            raise Rejected(f"nested deeper than {self.limits.depth}")
        self.pos += 1
        inner = self.unary(depth + 1)
        return inner if sign == "+" else _Node(-inner.expr, inner.terms, inner.degree, inner.bits)

    def power(self, depth: int) -> _Node:
        base = self.atom(depth)
        if self._is_op("**", "^") is None:
            return base
        self.pos += 1
        tok = self._peek()
        if tok is None or tok[0] != "int" or len(tok[1]) > 2 or int(tok[1]) > MAX_EXPONENT:
            raise Rejected(f"exponent must be an integer literal 0..{MAX_EXPONENT}")
        self.pos += 1
        if self._is_op("**", "^") is not None:
            raise Rejected("chained powers")
        e = int(tok[1])
        # Multinomial expansion of a sum of t terms to the e-th power has at most t**e terms.
        terms, degree, bits = base.terms ** e, base.degree * e, base.bits * e
        self._check(terms, degree, bits)
        return _Node(base.expr ** e, terms, degree, bits)

    def atom(self, depth: int) -> _Node:
        tok = self._peek()
        if tok is None:
            raise Rejected("unexpected end")
        kind, text = tok
        self.pos += 1
        if kind == "int":
            if len(text) > 20 or int(text) > MAX_LITERAL:
                raise Rejected(f"integer literal above {MAX_LITERAL}")
            value = int(text)
            return _Node(sympy.Integer(value), 1, 0, max(value.bit_length(), 1))
        if kind == "dec":
            if len(text) > 32:
                raise Rejected("decimal literal too long")
            # sympy.Float parses the digits itself (mpmath), which is what sympify did for a literal.
            return _Node(sympy.Float(text), 1, 0, 64)
        if kind == "name":
            if self._is_op("(") is not None and text in self.functions:
                return self.call(text, depth)
            return _Node(self.symbol(text), 1, 1, 1)
        if text == "(":
            inner = self.expr(depth + 1)
            self._expect(")")
            return inner
        raise Rejected(f"unexpected {text!r}")

    def call(self, name: str, depth: int) -> _Node:
        fn, fewest, most = self.functions[name]
        self._expect("(")
        args = [self.expr(depth + 1)]
        while self._is_op(",") is not None:
            self.pos += 1
            args.append(self.expr(depth + 1))
        self._expect(")")
        if not fewest <= len(args) <= most:
            raise Rejected(f"{name} takes {fewest}..{most} arguments, not {len(args)}")
        # The call is one atom after expansion; its arguments were each checked when parsed.
        return _Node(fn(*(a.expr for a in args)), 1, max(a.degree for a in args), sum(a.bits for a in args))

