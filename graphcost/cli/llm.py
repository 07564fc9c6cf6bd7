"""``graphcost llm MODEL``: a decoder export's prefill and decode floors, KV-cache bytes per token and the
decode tokens/s ceiling over a context sweep (see ``graphcost/llm.py`` for every formula, docs/llm.md)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from graphcost.cli.flags import (
    CliError,
    analysis_error,
    hardware_flags,
    model_flags,
    output_flags,
    parse_model_flags,
    resolve_hardware,
)
from graphcost.cli.output import guard, hardware_input, protected_paths, write_output
from graphcost.hardware import catalog

NAME = "llm"
HELP = "LLM decoder: prefill/decode bounds, KV bytes per token, tokens/s ceiling per context"
"""The line ``graphcost --help`` lists for this command."""
MAX_CONTEXTS = 64


def register(subparsers: Any) -> None:
    """The ``llm`` subcommand and its flags."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Recognize a decoder export (input_ids or inputs_embeds, past_key_values.* inputs, present.* "
                    "outputs), bind its batch / sequence / past dims per phase in the exact formulas, and report "
                    "weights, KV-cache bytes per token, the prefill floor for --prompt tokens, the decode floor and "
                    "tokens/s ceiling at each --context, the batch where decode turns compute bound, and whether "
                    "weights + KV + activations fit --memory-bytes.")
    p.add_argument("model", help="path to an .onnx decoder")
    hardware_flags(p)
    model_flags(p)
    p.add_argument("--prompt", type=int, default=512, metavar="P", help="prompt tokens for prefill (default 512)")
    p.add_argument("--context", default="128,1024,4096", metavar="L,L,...",
                   help="decode contexts: tokens already in the KV cache (default 128,1024,4096)")
    p.add_argument("--batch", type=int, default=1, metavar="B", help="sequences decoded together (default 1)")
    p.add_argument("--efficiency", type=float, default=1.0, metavar="E",
                   help="share of peak bandwidth reached, e.g. 0.7 (default 1)")
    p.add_argument("--memory-bytes", metavar="B", help="device memory capacity, e.g. 8e9 or 8GB (default: the "
                                                       "hardware spec's memory_bytes, when it has one)")
    output_flags(p, ("text", "json", "html"))


def _contexts(text: str) -> tuple[int, ...]:
    parts = [x.strip() for x in text.split(",") if x.strip()]
    if not parts or len(parts) > MAX_CONTEXTS or not all(x.isdigit() for x in parts):
        raise CliError(f"--context {text!r}: expected up to {MAX_CONTEXTS} whole numbers, e.g. 128,1024,4096")
    return tuple(int(x) for x in parts)


def run(args: argparse.Namespace) -> int:
    """Analyze the decoder and print its LLM view."""
    # lazy: the pipeline and the LLM view (0.52 s of imports); only llm needs them
    from graphcost.api import analyze
    from graphcost.llm import llm_view
    from graphcost.report.llm_text import render_llm

    contexts = _contexts(args.context)
    if args.prompt < 1:
        raise CliError("--prompt must be ≥ 1")
    if args.batch < 1:
        raise CliError("--batch must be ≥ 1")
    if not 0 < args.efficiency <= 1:
        raise CliError(f"--efficiency {args.efficiency:g}: must be in (0, 1]")
    capacity = None
    if args.memory_bytes:

        try:
            capacity = int(catalog.parse_quantity(args.memory_bytes))
        except ValueError as e:
            raise CliError(f"--memory-bytes {args.memory_bytes!r}: {str(e).splitlines()[0]}") from None
        if capacity <= 0:
            raise CliError("--memory-bytes must be > 0")
    if args.output:

        guard(args.output, lambda: {**protected_paths(args.model, args.output), **hardware_input(args.hardware)})
    flags = parse_model_flags(args)
    hw = resolve_hardware(args)
    a = flags.analysis(args.model)
    try:
        report = analyze(a, hardware=hw, capacity=not args.no_capacity, fusion=False, memory=False,
                         batchnorm=False)
        section = llm_view(a, report, hw, prompt=args.prompt, contexts=contexts, batch=args.batch,
                           efficiency=args.efficiency, memory_bytes=capacity)
    except ValueError as e:
        raise analysis_error(e, args.model) from None
    report = dataclasses.replace(report, llm=section)
    if args.format == "json":
        text = report.to_json() + "\n"
    elif args.format == "html":
        # lazy: the pipeline and the LLM view (0.52 s of imports); only llm needs them
        from graphcost.report.html import render_html

        text = render_html(report)
    else:
        text = render_llm(section, model=args.model, hardware=hw.name)
    write_output(args.output, text)
    return 0
