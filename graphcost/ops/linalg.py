"""Matrix products: MatMul, Gemm, Einsum.

Convention: one multiply-accumulate is ``FLOPS_PER_MAC`` (2) FLOPs; ``macs`` counts only the
multiply-accumulates of the product, bias adds are FLOPs but not MACs.
"""

from __future__ import annotations

import re

from graphcost._dims import Dim, numel, prod
from graphcost.ops._registry import FLOPS_PER_MAC, Kind, NodeView, Unknown, Work, rule


def matmul_macs(a: tuple[Dim, ...], b: tuple[Dim, ...], out: tuple[Dim, ...]) -> Dim:
    """MACs of numpy-semantics matmul: each output element is a dot product of length K."""
    k = a[-1]  # the contracted dim (a 1-D ``a`` is a row vector of length K)
    return numel(out) * k  # one MAC per output element per contracted index


@rule("MatMul", kind=Kind.COMPUTE)
def matmul(n: NodeView) -> Work:
    macs = matmul_macs(n.in_shape(0), n.in_shape(1), n.out_shape(0))  # 2·M·K·N per broadcast batch
    return Work(flops=FLOPS_PER_MAC * macs, macs=macs)


@rule("Gemm", kind=Kind.COMPUTE)
def gemm(n: NodeView) -> Work:
    a = n.in_shape(0)
    k = a[0] if n.attr("transA", 0) else a[1]  # contracted dim of op(A)
    out = n.out_numel(0)  # M·N
    macs = out * k  # one MAC per output element per k
    scale_alpha = out if n.attr("alpha", 1.0) != 1.0 else 0  # alpha·(AB): one multiply per output
    bias = out if n.has_input(2) else 0  # + beta·C: one add per output element
    scale_beta = out if n.has_input(2) and n.attr("beta", 1.0) != 1.0 else 0  # beta·C multiply
    return Work(flops=FLOPS_PER_MAC * macs + bias + scale_alpha + scale_beta, macs=macs)


_EINSUM_TERM = re.compile(r"[A-Za-z]|\.\.\.")


@rule("Einsum", kind=Kind.COMPUTE)
def einsum(n: NodeView) -> Work | Unknown:
    """Einsum: every output element sums the product over the contracted letters.

    MACs = ∏(size of every distinct letter) × (operands − 1): each point of the full index space
    multiplies the operands together (operands − 1 multiplies) and accumulates. For two operands
    this is the matmul count.
    """
    eq = str(n.attr("equation")).replace(" ", "")
    lhs = eq.split("->")[0]
    terms = lhs.split(",")
    sizes: dict[str, Dim] = {}
    for i, term in enumerate(terms):
        shape = n.in_shape(i)
        letters = _EINSUM_TERM.findall(term)
        if "..." in letters:
            pos = letters.index("...")
            n_ell = len(shape) - (len(letters) - 1)
            expanded = letters[:pos] + [f"...{j}" for j in range(n_ell)] + letters[pos + 1:]
        else:
            expanded = letters
        if len(expanded) != len(shape):
            return Unknown(f"Einsum term {term!r} does not match input {i} of rank {len(shape)}")
        for letter, dim in zip(expanded, shape, strict=True):
            if letter not in sizes or sizes[letter] == 1:
                sizes[letter] = dim
    space = prod(sizes.values())  # points of the joint index space
    operands = len(terms)
    if operands == 1:
        return Work(flops=space)  # a pure reduction/transpose: one add per input element
    macs = space * (operands - 1)
    return Work(flops=FLOPS_PER_MAC * macs, macs=macs)
