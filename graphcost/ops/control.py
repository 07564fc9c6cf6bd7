"""Control flow: If, Loop, Scan, SequenceMap.

Their cost is that of their bodies, which the costs pass walks (``passes/costs.py``): If carries
the more expensive branch, Loop its body times the trip count, Scan its body times the sequence
length. These entries give the ops their kind; the rule itself only runs when a node arrives
without its body, which a valid model never does.
"""

from __future__ import annotations

from graphcost.ops._registry import Kind, NodeView, Unknown, rule


@rule(("If", "Loop", "Scan", "SequenceMap"), kind=Kind.CONTROL)
def control(n: NodeView) -> Unknown:
    return Unknown(f"{n.op_type} without a body graph cannot be costed")
