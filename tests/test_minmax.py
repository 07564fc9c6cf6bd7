"""Min/Max of dims without sympy's order search (``graphcost._minmax``) give exactly sympy's own objects.

Each case is checked against ``sympy.Min`` / ``sympy.Max`` on the same arguments: equal,
same ``srepr`` (so the same argument order, and the same text in every report). A witness test pins that the
shortcut really skips the search (it would pass slowly, not fail, if the shortcut were lost, so the search is
made to raise). No timing is asserted.
"""

from __future__ import annotations

import pytest

from graphcost import _dimeval, _minmax
from graphcost._dims import ceil_log2, evaluate, symbol
from graphcost._sym import sympy

a, b, s, n = symbol("a"), symbol("b"), symbol("s"), symbol("n")
INT64_MAX = 2**63 - 1  # torchvision's max_output_boxes_per_class


def _same(got: object, want: object) -> None:
    assert got == want
    assert sympy.srepr(got) == sympy.srepr(want)
    assert str(got) == str(want)


CASES = [
    # (builder, args): incomparable pairs (the shortcut), then pairs sympy orders (the fallback)
    ("min", (INT64_MAX * (s - 1), s * (s - 1) / 2)),  # NonMaxSuppression's pair bound (s ≤ 2m or not)
    ("min", (12000, 4 * n)),  # a Gather's cap against a constant table: n = 0 below, n = 2**20 above
    ("min", (4 * a, 4 * b)),
    ("min", (4 * a, 4 * b, 8 * n)),  # three pairwise incomparable arguments
    ("max", (0, n - 1)),  # n = 0 below, n = 2 above
    ("max", (1, ceil_log2(n))),  # ReduceMax's tree depth: ⌈log2 n⌉ is 0 at n = 1, 20 at n = 2**20
    ("max", (0, s * ceil_log2(s) + 7 * s - 10)),  # undefined at s = 0: witnessed at s = 1 (−3) and s = 2**20
    ("min", (n, n + 1)),  # ordered: sympy returns n
    ("max", (0, n)),  # ordered by the assumptions (n ≥ 0): n
    ("min", (a, sympy.Min(b, 3))),  # nested: sympy flattens it
    ("max", (a, a)),  # one argument twice
    ("min", (3, 5)),  # numbers
    ("max", (0, s * ceil_log2(s) + 1)),  # no binding where it is below 0 (and 0 is undefined): sympy decides
]


@pytest.mark.parametrize(("kind", "args"), CASES)
def test_dim_min_max_are_sympys_objects(kind: str, args: tuple[object, ...]) -> None:
    mine, theirs = (_minmax.dim_min, sympy.Min) if kind == "min" else (_minmax.dim_max, sympy.Max)
    _same(mine(*args), theirs(*args))


def test_incomparable_pairs_skip_the_order_search(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_search(*_: object, **__: object) -> object:
        raise AssertionError("sympy searched for an order")

    for kind, args in CASES[:7]:  # the witnessed cases above
        want = (sympy.Min if kind == "min" else sympy.Max)(*args)
        with monkeypatch.context() as m:
            m.setattr(sympy.Min, "_find_localzeros", classmethod(no_search))
            m.setattr(sympy.Max, "_find_localzeros", classmethod(no_search))
            got = (_minmax.dim_min if kind == "min" else _minmax.dim_max)(*args)
        _same(got, want)


@pytest.mark.parametrize("u", [*range(1, 70), 2**40 - 1, 2**40, 2**40 + 1])
def test_exact_ceil_log2_is_sympys_value(u: int) -> None:
    # ⌈log2 u⌉ = (u − 1).bit_length() for an integer u ≥ 1; sympy's value of ceiling(log(u)/log(2)) is the same
    expr = 3 * s * ceil_log2(s) + 1
    want = int(expr.xreplace({s: sympy.Integer(u)}))
    assert evaluate(expr, {"s": u}) == want and isinstance(evaluate(expr, {"s": u}), int)


def test_exact_walk_refuses_log_of_zero() -> None:
    # log(0) is no number: the exact walk gives up, so the caller takes sympy's way (whatever it says there)
    with pytest.raises(_dimeval.NotExact):
        _dimeval.exact(ceil_log2(s), {"s": 0}, {})
