"""``api._formulas`` writes each total faster than ``to_text`` of its sympy sum (ints without sympy, ``bytes`` from
the other totals' expansions, the terms ordered without sympy's dense sort): the text must be the same."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from graphcost import api
from graphcost._dims import to_text
from graphcost._sym import sympy


def _reference(top: list[Any]) -> dict[str, str]:
    """The formulas as written before: every total a sympy sum, then ``to_text``."""
    totals: dict[str, Any] = {}
    for key in ("flops", "macs", "bytes_read", "bytes_written"):
        terms = [getattr(c, key) for c in top if getattr(c, key) is not None]
        ints = sum(t for t in terms if isinstance(t, int))
        symbolic = [t for t in terms if not isinstance(t, int)]
        totals[key] = sympy.Add(ints, *symbolic) if symbolic else sympy.Integer(ints)
    totals["bytes"] = totals["bytes_read"] + totals["bytes_written"]
    if any(c.bytes_as_written is not None for c in top):
        totals["bytes_as_written"] = sympy.Add(*(
            c.bytes_as_written if c.bytes_as_written is not None else c.bytes_read + c.bytes_written
            for c in top if c.bytes_read is not None and c.bytes_written is not None))
    return {k: to_text(v) for k, v in totals.items()}


def _count(rng: random.Random, names: list[Any]) -> Any:
    """A count as the cost rules make them: ints, monomials, powers, Max/ceiling/floor factors, sums, fractions."""
    pick = rng.random()
    a, b = rng.sample(names, 2)
    if pick < 0.2:
        return rng.randrange(-3, 5000)
    if pick < 0.4:
        return rng.randrange(1, 64) * a * (b if rng.random() < 0.5 else 1)
    if pick < 0.5:
        return rng.randrange(1, 9) * a ** rng.randrange(1, 4) * b
    if pick < 0.6:
        return a * sympy.Max(1, sympy.ceiling(sympy.log(b) / sympy.log(2)))
    if pick < 0.7:
        return sympy.floor(a / 2) * (b + 1) * rng.randrange(1, 5)
    if pick < 0.8:
        return sympy.Rational(rng.randrange(1, 7), rng.randrange(1, 5)) * a - rng.randrange(0, 3) * b
    if pick < 0.9:
        return (a + 1) * (b + 2)
    return None


def test_formulas_are_the_text_of_the_sympy_sums() -> None:
    rng = random.Random(20261203)
    symbols = [sympy.Symbol(n, integer=True, positive=True) for n in
               ("batch", "seq", "h", "w", "unk__NonZero_10_output_0_1", "unk__NonZero_2_output_0_1", "n_1", "N")]
    for trial in range(40):
        names = symbols[: rng.randrange(2, len(symbols) + 1)]
        top = []
        for _ in range(rng.randrange(1, 60)):
            row = {k: _count(rng, names) for k in ("flops", "macs", "bytes_read", "bytes_written")}
            row["bytes_as_written"] = _count(rng, names) if trial % 5 == 0 and rng.random() < 0.3 else None
            top.append(SimpleNamespace(**row))
        costs = SimpleNamespace(top_level=lambda top=top: top)
        assert api._formulas(costs) == _reference(top), trial  # type: ignore[arg-type]


def test_a_total_of_plain_ints_is_written_without_sympy_and_matches() -> None:
    top = [SimpleNamespace(flops=3, macs=None, bytes_read=-2, bytes_written=10**20, bytes_as_written=None)]
    costs = SimpleNamespace(top_level=lambda: top)
    assert api._formulas(costs) == _reference(top)  # type: ignore[arg-type]
