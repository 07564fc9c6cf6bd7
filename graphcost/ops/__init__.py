"""Cost rules, one op family per module. Importing this package registers every built-in rule.

Where does the rule for an op live? ``grep -rn '"OpName"' graphcost/ops``.
"""

from graphcost.ops._registry import (
    FLOPS_PER_MAC,
    Kind,
    NodeView,
    RuleEntry,
    ShapeUnknown,
    Unknown,
    Work,
    lookup,
    register_free,
    registered,
    rule,
    unregister,
    windows,
)

# Family modules register their rules on import (explicit list, so the table is greppable).
from graphcost.ops import _families  # noqa: F401  isort: skip

__all__ = [
    "FLOPS_PER_MAC",
    "Kind",
    "NodeView",
    "RuleEntry",
    "ShapeUnknown",
    "Unknown",
    "Work",
    "lookup",
    "register_free",
    "registered",
    "rule",
    "unregister",
    "windows",
]
