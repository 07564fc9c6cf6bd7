"""Elementwise arithmetic, activations, comparisons and casts.

Convention: one FLOP per output element for every arithmetic op and activation, whatever its
instruction cost (Exp, Erf and Tanh included); broadcasting makes the output, not the inputs, the
count. Comparisons and logical ops count one op per output element too. Casts and selects move data
but compute nothing: zero FLOPs, registered on purpose.
"""

from __future__ import annotations

from graphcost.ops._registry import Kind, NodeView, Work, register_free, rule

ARITHMETIC = (
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Neg", "Abs", "Reciprocal", "Sqrt", "Exp", "Log",
    "Floor", "Ceil", "Round", "Sign", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
    "Cosh", "Asinh", "Acosh", "Atanh", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
    "BitwiseNot", "IsNaN", "IsInf",
)
ACTIVATIONS = (
    "Relu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "Tanh", "Elu", "Selu", "Celu", "Gelu",
    "Softplus", "Softsign", "ThresholdedRelu", "HardSwish", "Mish", "Clip", "Shrink", "Swish",
)
COMPARISONS = ("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Not", "And", "Or", "Xor")


@rule(ARITHMETIC + ACTIVATIONS + COMPARISONS, kind=Kind.ELEMENTWISE)
def one_per_output(n: NodeView) -> Work:
    return Work(flops=n.out_numel(0))  # one op per output element


@rule(("Sum", "Mean", "Max", "Min"), kind=Kind.ELEMENTWISE)
def variadic(n: NodeView) -> Work:
    """Variadic ops combine k inputs with k−1 binary ops per output element (Mean adds one divide)."""
    k = sum(1 for i in range(len(n.inputs)) if n.has_input(i))
    per_element = max(k - 1, 0) + (1 if n.op_type == "Mean" else 0)
    return Work(flops=n.out_numel(0) * per_element)


# Select and convert: data movement with no arithmetic.
register_free(("Cast", "CastLike", "Where"), kind=Kind.ELEMENTWISE)
