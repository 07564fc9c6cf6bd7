"""``graphcost train MODEL``: one training step's cost, checkpointing what-ifs and parallel splits.

The forward graph's FLOPs and bytes plus backward's (``passes/training.py``), the activations backward keeps,
the memory/time trade-off of checkpointing policies (``passes/checkpointing.py``), and with
``--tensor-parallel``/``--pipeline-parallel``/``--data-parallel`` the per-device cost and the communication per
step on a cluster (``passes/parallel.py``, ``hardware/interconnect.py``). docs/training.md shows the output.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from graphcost.cli.flags import (
    EXIT_OK,
    CliError,
    analysis_error,
    hardware_flags,
    model_flags,
    output_flags,
    parse_model_flags,
    resolve_hardware,
)
from graphcost.cli.output import guard, hardware_input, protected_paths, write_output

NAME = "train"
HELP = "training step: forward + backward cost, checkpointing and parallel what-ifs"
"""The line ``graphcost --help`` lists for this command."""
DEFAULT_TRAIN_HARDWARE = "h100-sxm"
TABLE_POLICIES = ("none", "blocks", "sqrt")


def register(subparsers: Any) -> None:
    """The ``train`` subcommand and its flags."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Forward + backward FLOPs and bytes of one training step from a forward export, the "
                    "activations backward keeps, checkpointing policies' memory/time trade-off, and per-device "
                    "cost and communication under tensor, pipeline and data parallelism (ZeRO 1-3). "
                    f"Hardware defaults to {DEFAULT_TRAIN_HARDWARE}.")
    p.add_argument("model", help="path to an .onnx file (a forward export)")
    hardware_flags(p)
    model_flags(p)
    p.add_argument("--checkpoint", default="none", metavar="POLICY",
                   help="checkpointing policy for the memory total: none (default), blocks, every:K, sqrt, "
                        "keep:T1,T2 (the trade-off table always shows none, blocks and sqrt too)")
    p.add_argument("--tensor-parallel", type=int, default=1, metavar="N", help="Megatron tensor-parallel ways")
    p.add_argument("--pipeline-parallel", type=int, default=1, metavar="N", help="pipeline stages")
    p.add_argument("--micro-batches", type=int, default=1, metavar="M", help="micro-batches per step (pipeline)")
    p.add_argument("--data-parallel", type=int, default=1, metavar="N", help="data-parallel replicas")
    p.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3), help="ZeRO stage with --data-parallel")
    p.add_argument("--cluster", metavar="NAME|FILE",
                   help="cluster spec: a catalog name (dgx-h100, pcie-node) or a TOML file (default dgx-h100)")
    p.add_argument("--tokens", type=int, metavar="T", help="tokens per step, for the 6·N·T reference line")
    p.add_argument("--optimizer-state-multiplier", type=float, default=2.0, metavar="K",
                   help="optimizer state as K × weight bytes (default 2, Adam)")
    output_flags(p)


def run(args: argparse.Namespace) -> int:
    """Cost one training step of the forward export and print it."""
    flags = parse_model_flags(args)
    if args.output:

        guard(args.output, lambda: {**protected_paths(args.model, args.output), **hardware_input(args.hardware),
                                    **hardware_input(args.cluster)})
    if args.tokens is not None and args.tokens < 1:
        raise CliError("--tokens must be ≥ 1")
    if args.hardware is None and not args.peak_flops:
        args.hardware = DEFAULT_TRAIN_HARDWARE
    hw = resolve_hardware(args)
    # lazy: the training passes pull in the pipeline (0.52 s of imports); only train needs them
    from graphcost.hardware.interconnect import resolve_cluster
    from graphcost.passes.checkpointing import parse_policy
    from graphcost.passes.parallel import ParallelOptions

    try:
        policy = parse_policy(args.checkpoint)
        options = ParallelOptions(args.tensor_parallel, args.pipeline_parallel, args.data_parallel,
                                  args.micro_batches, args.zero, args.optimizer_state_multiplier)
        cluster = resolve_cluster(args.cluster)
    except ValueError as e:
        raise CliError(str(e).splitlines()[0]) from None
    analysis = flags.analysis(args.model)
    try:
        report = build(analysis, hw, policy, options, cluster, tokens=args.tokens)
    except ValueError as e:
        raise analysis_error(e, args.model) from None
    if args.format == "json":
        text = json.dumps(report, indent=2, default=str) + "\n"
    else:
        # lazy: the training passes pull in the pipeline (0.52 s of imports); only train needs them
        from graphcost.report.training_text import render

        text = render(report)
    write_output(args.output, text)
    return EXIT_OK


def build(analysis: Any, hw: Any, policy: Any, options: Any, cluster: Any, *, tokens: int | None = None
          ) -> dict[str, Any]:
    """The report as a dict: ``training`` (cost, kept activations, blocks, checkpointing) and ``parallel``."""
    # lazy: the training passes pull in the pipeline (0.52 s of imports); only train needs them
    from graphcost._dims import evaluate
    from graphcost.analysis import stage
    from graphcost.graph import TensorKind
    from graphcost.passes._blocks import find_blocks
    from graphcost.passes.checkpointing import checkpoint, parse_policy, tradeoff
    from graphcost.passes.costs import tensor_bytes
    from graphcost.passes.liveness import TrainingOptions, liveness
    from graphcost.passes.parallel import parallel
    from graphcost.passes.training import training_cost

    graph, binding = analysis.graph, analysis.binding.values
    with stage("training", graph):
        cost = training_cost(graph, analysis.costs, binding, hw)
        blocks = find_blocks(graph)
        mem = liveness(graph, binding, training=TrainingOptions(options.optimizer_state_multiplier),
                       search_order=False).training
        state = mem.parameters + mem.gradients + mem.optimizer_state
        shown = [parse_policy(p) for p in TABLE_POLICIES]
        if policy.label not in TABLE_POLICIES:
            shown.append(policy)
        rows = tradeoff(shown, graph, cost, blocks, state_bytes=state, hardware=hw)
        chosen = checkpoint(policy, graph, cost, blocks, state_bytes=state, hardware=hw)
        sizes: dict[str, int] = {}
        for name, t in graph.tensors().items():
            if t.kind == TensorKind.PARAMETER:
                value = tensor_bytes(t)
                sizes[name] = 0 if value is None else int(evaluate(value, binding))
    block_nodes = {n for b in blocks.blocks for n in b.nodes}
    non_embedding = _block_parameters(graph, block_nodes) if blocks.blocks else None
    training = cost.to_dict()
    training.update({
        "hardware": hw.name,
        "memory": {"parameters": mem.parameters, "gradients": mem.gradients, "optimizer_state": mem.optimizer_state,
                   "activations_kept": chosen.kept_bytes, "peak_activations": chosen.peak_activation_bytes,
                   "total": chosen.peak_memory_bytes, "checkpoint": chosen.policy},
        "blocks": {"rule": blocks.rule, "count": len(blocks.blocks),
                   "blocks": [{"label": b.label, "nodes": len(b.nodes), "inputs": list(b.inputs),
                               "residual_adds": b.residual_adds} for b in blocks.blocks]},
        "checkpointing": [r.to_dict() for r in rows],
        "non_embedding_parameters": non_embedding,
        "tokens": tokens,
        "six_n_t": None if tokens is None or non_embedding is None else 6 * non_embedding * tokens,
    })
    out: dict[str, Any] = {"model": str(analysis.model.path or ""), "training": training, "parallel": None}
    if options.tensor > 1 or options.pipeline > 1 or options.data > 1:
        with stage("parallel", graph):
            out["parallel"] = parallel(graph, cost, blocks, options, hardware=hw, cluster=cluster,
                                       parameter_bytes=sizes).to_dict()
    return out


def _block_parameters(graph: Any, block_nodes: set[str]) -> int:
    """Elements of the floating-point parameters read by block nodes (the non-embedding N of 6·N·T)."""
    # lazy: the training passes pull in the pipeline (0.52 s of imports); only train needs them
    from graphcost._dims import numel
    from graphcost.graph import TensorKind
    from graphcost.passes.training import requires_grad

    seen: set[str] = set()
    total = 0
    for node in graph.nodes():
        if node.name not in block_nodes:
            continue
        for x in node.inputs:
            t = graph.tensor(x) if x else None
            if t is None or x in seen or t.kind != TensorKind.PARAMETER or not requires_grad(graph, x):
                continue  # one-element scales (1/√d) are not trained
            seen.add(x)
            n = numel(t.shape) if t.shape is not None else 0
            total += n if isinstance(n, int) else 0
    return total
