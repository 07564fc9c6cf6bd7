"""The classic ML ops of ``ai.onnx.ml`` (what sklearn exporters write).

Linear models and SVM kernels count their dot products as MACs; trees count the compares of the
longest path (a worst case, said in the rule's note); lookups, casts and container conversions do
no arithmetic and are registered as zero on purpose.
"""

from __future__ import annotations

from collections.abc import Sequence

from graphcost._dims import Dim, prod
from graphcost.ops._registry import (
    FLOPS_PER_MAC,
    Kind,
    NodeView,
    Work,
    register_free,
    rule,
)
from graphcost.ops.reduce import SOFTMAX_FLOPS_PER_ELEMENT

ML = "ai.onnx.ml"


def _batch(shape: Sequence[Dim]) -> Dim:
    """Rows of an ML input: [N, F] has N, a lone feature vector [F] has 1."""
    return prod(shape[:-1])


# --- ai.onnx.ml ----------------------------------------------------------------------------------------

# Lookups, casts, concatenations and container conversions: no arithmetic.
register_free(("ArrayFeatureExtractor", "LabelEncoder", "CategoryMapper", "CastMap", "DictVectorizer",
               "FeatureVectorizer", "OneHotEncoder", "ZipMap"), domain=ML, kind=Kind.MOVEMENT)

POST_TRANSFORM_FLOPS = {"NONE": 0, "SOFTMAX": SOFTMAX_FLOPS_PER_ELEMENT, "SOFTMAX_ZERO": SOFTMAX_FLOPS_PER_ELEMENT,
                        "LOGISTIC": 1, "PROBIT": 1}
"""Per score: softmax 5 (reduce.py), logistic and probit 1 each (activations)."""
_POST_TRANSFORM_CODES = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")  # TreeEnsemble's ints


def _post(n: NodeView, scores: Dim) -> Dim:
    pt = n.attr("post_transform")  # a string, or TreeEnsemble's int code; schema default NONE / 0
    name = "NONE" if pt is None else _POST_TRANSFORM_CODES[pt] if isinstance(pt, int) else str(pt)
    return POST_TRANSFORM_FLOPS.get(name, 1) * scores


@rule("Binarizer", domain=ML, kind=Kind.ELEMENTWISE)
def binarizer(n: NodeView) -> Work:
    return Work(flops=n.in_numel(0))  # one compare per element


@rule("Imputer", domain=ML, kind=Kind.ELEMENTWISE)
def imputer(n: NodeView) -> Work:
    return Work(flops=n.in_numel(0))  # one compare with the missing-value marker per element


@rule("Scaler", domain=ML, kind=Kind.ELEMENTWISE)
def scaler(n: NodeView) -> Work:
    return Work(flops=2 * n.in_numel(0))  # (x − offset) · scale


NORMALIZER_FLOPS_PER_ELEMENT = {"MAX": 2, "L1": 3, "L2": 4}
"""MAX: compare 1 + divide 1; L1: |x| 1 + add 1 + divide 1; L2 (sqrt(x²/Σx²)): square 1 + add 1 + divide 1
+ sqrt 1."""


@rule("Normalizer", domain=ML, kind=Kind.NORMALIZATION)
def normalizer(n: NodeView) -> Work:
    return Work(flops=NORMALIZER_FLOPS_PER_ELEMENT.get(str(n.attr("norm", "MAX")), 3) * n.in_numel(0))


@rule(("LinearClassifier", "LinearRegressor"), domain=ML, kind=Kind.COMPUTE)
def linear_model(n: NodeView) -> Work:
    """Scores = X·Wᵀ + b: one MAC per coefficient per row, one add per intercept per row, the post
    transform per score, and (classifier) an argmax over the classes per row."""
    rows = _batch(n.in_shape(0))
    coefficients = len(n.attr("coefficients") or [])
    intercepts = len(n.attr("intercepts") or [])
    if n.op_type == "LinearClassifier":
        outputs = len(n.attr("classlabels_ints") or n.attr("classlabels_strings") or []) or max(intercepts, 1)
    else:
        outputs = int(n.attr("targets", 1))
    macs = rows * coefficients  # the dot products
    flops = FLOPS_PER_MAC * macs + rows * intercepts + _post(n, rows * outputs)
    if n.op_type == "LinearClassifier":
        flops += rows * outputs  # argmax for the label
    return Work(flops=flops, macs=macs)


def _kernel_flops(n: NodeView, features: Dim) -> tuple[Dim, Dim]:
    """(MACs, other FLOPs) of one SVM kernel evaluation over ``features``."""
    kind = str(n.attr("kernel_type", "LINEAR"))
    if kind == "RBF":
        return features, features + 2  # Σ(x − sv)²: subtract + MAC per feature; · gamma, exp
    if kind in ("POLY", "SIGMOID"):
        return features, 3  # dot; · gamma, + coef0, pow/tanh
    return features, 0  # LINEAR: the dot product


@rule(("SVMClassifier", "SVMRegressor"), domain=ML, kind=Kind.COMPUTE)
def svm(n: NodeView) -> Work:
    """Kernel evaluations against every support vector, then the dual-coefficient sums.

    Classifier (one-vs-one, libsvm layout): ``coefficients`` holds (C−1)·n_sv dual coefficients, one MAC
    each per row; per class pair: + rho 1 and a vote compare 1, and Platt scaling 3 when prob_a is set
    (the pairwise-coupling solver that follows is iterative and not counted). Without support vectors
    the model is linear: one MAC per coefficient per row.
    """
    x = n.in_shape(0)
    rows, features = _batch(x), x[-1]
    coefficients = len(n.attr("coefficients") or [])
    if n.op_type == "SVMClassifier":
        n_sv = sum(int(v) for v in (n.attr("vectors_per_class") or []))
        classes = len(n.attr("classlabels_ints") or n.attr("classlabels_strings") or [])
    else:
        n_sv, classes = int(n.attr("n_supports", 0)), 2
    pairs = classes * (classes - 1) // 2
    if n_sv == 0:  # linear mode: coefficients are a weight matrix
        macs = rows * coefficients
        return Work(flops=FLOPS_PER_MAC * macs + rows * len(n.attr("rho") or []), macs=macs)
    k_macs, k_other = _kernel_flops(n, features)
    macs = rows * (n_sv * k_macs + coefficients)  # kernels + dual sums
    per_pair = 2 + (3 if n.attr("prob_a") else 0)  # rho and vote (+ Platt)
    flops = FLOPS_PER_MAC * macs + rows * n_sv * k_other + rows * pairs * per_pair
    return Work(flops=flops + _post(n, rows * max(classes, 1)), macs=macs)


def _longest_paths(children: list[tuple[int | None, int | None]], roots: Sequence[int]) -> int:
    """Σ over roots of the number of interior nodes on the longest root-to-leaf path (iterative)."""
    depth: dict[int, int] = {}
    for root in roots:
        stack = [root]
        while stack:
            node = stack[-1]
            kids = [c for c in children[node] if c is not None and c not in depth]
            if kids:
                stack.extend(kids)
                continue
            stack.pop()
            depth[node] = 1 + max((depth[c] for c in children[node] if c is not None), default=0)
    return sum(depth[r] for r in roots)


def _tree_v5_depths(n: NodeView) -> tuple[int, int]:
    """(Σ longest path, trees) of an opset-5 TreeEnsemble: children index nodes unless flagged leaves."""
    true_ids, false_ids = n.attr("nodes_truenodeids"), n.attr("nodes_falsenodeids")
    true_leaf, false_leaf = n.attr("nodes_trueleafs"), n.attr("nodes_falseleafs")
    children = [(None if tl else int(t), None if fl else int(f))
                for t, f, tl, fl in zip(true_ids, false_ids, true_leaf, false_leaf, strict=True)]
    roots = [int(r) for r in n.attr("tree_roots")]
    return _longest_paths(children, roots), len(roots)


def _tree_legacy_depths(n: NodeView) -> tuple[int, int]:
    """(Σ longest path, trees) of TreeEnsembleClassifier/Regressor: nodes are (tree id, node id) pairs."""
    tree_ids, node_ids = n.attr("nodes_treeids"), n.attr("nodes_nodeids")
    leaf = [(m.decode() if isinstance(m, bytes) else str(m)) == "LEAF" for m in n.attr("nodes_modes")]
    index = {(int(t), int(i)): k for k, (t, i) in enumerate(zip(tree_ids, node_ids, strict=True))}
    links = [(None, None) if leaf[k] else (index.get((int(t), int(tn))), index.get((int(t), int(fn))))
             for k, (t, tn, fn) in enumerate(zip(tree_ids, n.attr("nodes_truenodeids"), n.attr("nodes_falsenodeids"),
                                                 strict=True))]
    referenced = {c for pair in links for c in pair if c is not None}
    roots = [k for k in range(len(links)) if k not in referenced]
    # A leaf is not a compare: drop leaf children, so a path counts its interior nodes only.
    children = [tuple(None if c is None or leaf[c] else c for c in pair) for pair in links]
    interior_roots = [r for r in roots if not leaf[r]]
    return _longest_paths(children, interior_roots), len(roots)  # type: ignore[arg-type]


def _tree_work(n: NodeView, compares: int, trees: int, outputs: int, average: bool) -> Work:
    """Per row and tree: one compare per node on the path (bounded by the tree's longest path: the real
    path depends on the features), one add of the reached leaf's weights; then the average's divides,
    the post transform, and the classifier's argmax.
    """
    rows = _batch(n.in_shape(0))
    flops = rows * (compares + trees)  # path compares + leaf accumulation
    flops += rows * outputs * (1 if average else 0) + _post(n, rows * outputs)
    if n.op_type == "TreeEnsembleClassifier":
        flops += rows * outputs  # argmax for the label
    return Work(flops=flops, note="tree paths: longest (worst case)")


@rule("TreeEnsemble", domain=ML, kind=Kind.COMPUTE)
def tree_ensemble(n: NodeView) -> Work:
    compares, trees = _tree_v5_depths(n)
    average = int(n.attr("aggregate_function", 1)) == 0  # 0 AVERAGE, 1 SUM, 2 MIN, 3 MAX
    return _tree_work(n, compares, trees, int(n.attr("n_targets")), average)


@rule(("TreeEnsembleClassifier", "TreeEnsembleRegressor"), domain=ML, kind=Kind.COMPUTE)
def tree_ensemble_legacy(n: NodeView) -> Work:
    compares, trees = _tree_legacy_depths(n)
    ids = n.attr("class_ids") or n.attr("target_ids") or []
    outputs = max(1, len({int(i) for i in ids}))
    average = str(n.attr("aggregate_function", "SUM")) == "AVERAGE"
    return _tree_work(n, compares, trees, outputs, average)
