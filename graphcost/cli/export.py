"""``graphcost export SOURCE -o OUT``: export a PyTorch, TensorFlow or JAX model to ONNX, verified in onnxruntime.

SOURCE is ``ref:FRAMEWORK/ARCH`` (a reference model from ``graphcost.models.zoo``), ``FILE.py:FACTORY`` (the file
is imported and ``FACTORY()`` returns the model; ``--input`` gives the example inputs), or a TensorFlow SavedModel
directory. Exit codes: 0 written; 2 bad input, a missing framework, a failed export or a mismatch in onnxruntime
(one line on stderr, nothing written).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphcost.cli.flags import CliError
from graphcost.cli.output import OutputPathError, check_output

if TYPE_CHECKING:
    import numpy as np

NAME = "export"
HELP = "export a PyTorch, TensorFlow or JAX model to ONNX, verified in onnxruntime"
"""The line ``graphcost --help`` lists for this command."""

DTYPES = ("float32", "float16", "float64", "int32", "int64", "bool")
DEFAULT_DIM_SIZE = 2  # example size of a named dim other than batch and seq


def register(subparsers: Any) -> None:
    """The ``export`` subcommand and its flags."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Export a model to ONNX with its framework's exporter (torch dynamo, tf2onnx, jax2onnx), run the "
                    "file in onnxruntime against the framework at the example shapes and at a second shape for "
                    "dynamic dims, and write it only if they agree.")
    p.add_argument("source", metavar="SOURCE",
                   help="ref:FRAMEWORK/ARCH (e.g. ref:torch/cnn), FILE.py:FACTORY, or a TF SavedModel directory")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="the .onnx file to write")
    p.add_argument("--framework", choices=("torch", "tf", "jax"),
                   help="the framework of a FILE.py:FACTORY model (inferred from the object when it can be)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=DIMS[:DTYPE]",
                   help="an example input (repeatable, in call order): dims are ints or names of dynamic dims, "
                        "e.g. x=batch,3,32,32 or ids=batch,seq:int64 (dtype float32 by default)")
    p.add_argument("--batch", type=int, default=2, help="example size of the batch dim (default 2)")
    p.add_argument("--seq", type=int, default=16, help="example size of the seq dim (default 16)")
    p.add_argument("--features", type=int, default=1024, help="width of ref:*/dense (default 1024)")
    p.add_argument("--seed", type=int, default=0, help="seed of a reference model's weights and inputs (default 0)")
    p.add_argument("--opset", type=int, default=18, help="ONNX opset (default 18; tf2onnx stops at 18)")
    p.add_argument("--legacy", action="store_true", help="torch: the TorchScript exporter instead of dynamo")
    p.add_argument("--keep-batchnorm", action="store_true",
                   help="torch: keep BatchNormalization nodes (the exporters fold them into Conv by default)")
    p.add_argument("--static", action="store_true", help="export every dim fixed at its example size")
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime check (not recommended)")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of the check (default 1e-4)")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance of the check (default 1e-5)")


def _error(msg: str) -> Exception:
    return CliError(f"{NAME}: {msg}")


def parse_input(text: str, *, batch: int, seq: int) -> tuple[str, tuple[int, ...], str, dict[int, str]]:
    """``x=batch,3,32,32[:int64]`` → (name, example shape, dtype, {axis: dim name}); named dims get example sizes."""
    name, sep, spec = text.partition("=")
    name = name.strip()
    if not sep or not name or not spec:
        raise _error(f"--input {text!r}: expected NAME=DIMS[:DTYPE], e.g. x=batch,3,32,32")
    spec, _, dtype = spec.partition(":")
    dtype = dtype.strip() or "float32"
    if dtype not in DTYPES:
        raise _error(f"--input {text!r}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    shape: list[int] = []
    dynamic: dict[int, str] = {}
    for axis, part in enumerate(p.strip() for p in spec.split(",")):
        if part.isdigit() and int(part) > 0:
            shape.append(int(part))
        elif part.isidentifier():
            dynamic[axis] = part
            shape.append(_example_size(part, batch=batch, seq=seq))
        else:
            raise _error(f"--input {text!r}: dim {part!r} is neither a positive int nor a name like batch")
    return name, tuple(shape), dtype, dynamic


def _example_size(dim: str, *, batch: int, seq: int) -> int:
    return {"batch": batch, "seq": seq}.get(dim, DEFAULT_DIM_SIZE)


def _example(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Random example values: floats standard normal, integers 0..9 (valid as small ids), booleans fair coins."""
    import numpy as np  # lazy: numpy is 0.12 s of imports, only for the example inputs an export runs on

    dt = np.dtype(dtype)
    value: np.ndarray
    if dt == np.bool_:
        value = rng.random(shape) < 0.5
    elif np.issubdtype(dt, np.integer):
        value = rng.integers(0, 10, size=shape)
    else:
        value = rng.standard_normal(shape)
    return np.ascontiguousarray(value, dtype=dt)


def _inputs(args: argparse.Namespace) -> tuple[dict[str, np.ndarray], dict[str, dict[int, str]]]:
    import numpy as np  # lazy: as in _example

    inputs: dict[str, np.ndarray] = {}
    dynamic: dict[str, dict[int, str]] = {}
    rng = np.random.default_rng(args.seed)
    for text in args.input:
        name, shape, dtype, dims = parse_input(text, batch=args.batch, seq=args.seq)
        if name in inputs:
            raise _error(f"--input {name} given twice")
        inputs[name] = _example(rng, shape, dtype)
        if dims:
            dynamic[name] = dims
    return inputs, dynamic


def _saved_model_inputs(source: Path, args: argparse.Namespace) -> tuple[dict[str, np.ndarray],
                                                                          dict[str, dict[int, str]]]:
    """Example inputs from the SavedModel's signature: unknown dims are batch (axis 0), seq (axis 1), else 2."""
    # lazy: the exporters and the zoo (0.17 s of imports, frameworks on first use) only for export and bench
    import numpy as np

    from graphcost.export._tf import saved_model_inputs

    inputs: dict[str, np.ndarray] = {}
    dynamic: dict[str, dict[int, str]] = {}
    rng = np.random.default_rng(args.seed)
    for name, (shape, dtype) in saved_model_inputs(source).items():
        dims = {axis: "batch" if axis == 0 else "seq" if axis == 1 else f"{name}_{axis}"
                for axis, d in enumerate(shape) if d is None}
        sizes = tuple(_example_size(dims[a], batch=args.batch, seq=args.seq) if d is None else d
                      for a, d in enumerate(shape))
        inputs[name] = _example(rng, sizes, dtype)
        if dims:
            dynamic[name] = dims
    return inputs, dynamic


def _load_factory(spec: str) -> Any:
    file_part, _, factory = spec.rpartition(":")
    path = Path(file_part)
    if not path.is_file():
        raise _error(f"{file_part}: no such file")
    if not factory.isidentifier():
        raise _error(f"{spec}: {factory!r} is not a function name; expected FILE.py:FACTORY")
    module_name = f"_graphcost_export_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise _error(f"{file_part}: cannot import it as Python")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.resolve().parent))  # the file may import its neighbours
    try:
        loader_spec.loader.exec_module(module)
        fn = getattr(module, factory, None)
        if fn is None or not callable(fn):
            raise _error(f"{file_part} has no function {factory}")
        return fn()
    except ImportError as e:
        # lazy: the exporters and the zoo (0.17 s of imports, frameworks on first use) only for export and bench
        from graphcost.models.zoo import FrameworkMissing

        if isinstance(e, FrameworkMissing):
            raise _error(str(e)) from None
        missing = getattr(e, "name", None) or str(e)
        extra = {"torch": "torch", "tensorflow": "tf", "keras": "tf", "jax": "jax", "flax": "jax"}.get(
            str(missing).split(".")[0])
        hint = f" (pip install 'graphcost[{extra}]')" if extra else ""
        raise _error(f"{file_part}: {str(missing).split('.')[0]} is not installed{hint}") from None
    except Exception as e:
        if type(e).__name__ == "CliError":
            raise
        raise _error(f"{spec}: {type(e).__name__}: {_first_line(e)}") from None
    finally:
        sys.path.remove(str(path.resolve().parent))


def _first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return lines[0].strip() if lines else type(e).__name__


def _infer_framework(obj: Any) -> str | None:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.nn.Module):
        return "torch"
    keras = sys.modules.get("keras")
    if keras is not None and isinstance(obj, keras.layers.Layer):
        return "tf"
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(obj, (tf.Module, tf.types.experimental.GenericFunction)):
        return "tf"
    nnx = sys.modules.get("flax.nnx")
    if nnx is not None and isinstance(obj, nnx.Module):
        return "jax"
    if callable(obj):  # a plain function: the one framework its module imported (jax.numpy, torch, tensorflow)
        module = sys.modules.get(getattr(obj, "__module__", "") or "")
        names = {getattr(v, "__name__", "").split(".")[0] for v in vars(module).values()} if module else set()
        found = [fw for fw, root in (("jax", "jax"), ("torch", "torch"), ("tf", "tensorflow")) if root in names]
        if len(found) == 1:
            return found[0]
    return None


def _input_paths(source: str) -> list[Path]:
    """The files or folders SOURCE reads (none for a reference model)."""
    if source.startswith("ref:"):
        return []
    if Path(source).exists():
        return [Path(source)]
    file_part = source.rpartition(":")[0]
    return [Path(file_part)] if file_part and Path(file_part).exists() else []


def _protected(source: str) -> dict[str, str]:
    """The files SOURCE reads: a FILE.py, or every file of a SavedModel directory (its variables too)."""
    out: dict[str, str] = {}
    for src in _input_paths(source):
        if src.is_dir():
            for root, _, files in os.walk(src):
                out.update({os.path.join(root, f): f"the input SavedModel's file {f!r}" for f in files})
        else:
            out[str(src)] = "the input"
    return out


def _check_output(source: str, output: str) -> Path:
    out = Path(output)
    if out.is_dir():
        raise _error(f"-o {output}: is a directory; give the .onnx file to write")
    for src in _input_paths(source):
        if src.is_dir() and out.resolve().is_relative_to(src.resolve()):
            raise _error(f"-o {output}: refusing to write inside the input SavedModel")
    try:  # the source file under any name (symlink, hard link, ..), a SavedModel's files, a FIFO or device
        check_output(output, _protected(source), flag="-o")
    except OutputPathError as e:
        raise _error(str(e)) from None
    if not out.parent.is_dir():
        raise _error(f"-o {output}: folder {out.parent} does not exist")
    return out


def run(args: argparse.Namespace) -> int:
    """Build or load the model, export it to ``args.output`` and verify it in onnxruntime."""
    # lazy: the exporters and the zoo (0.17 s of imports, frameworks on first use) only for export and bench
    from graphcost.export import ExportError, export_jax, export_native, export_tf, export_torch
    from graphcost.models.zoo import FrameworkMissing, build_native

    for flag, value in (("--batch", args.batch), ("--seq", args.seq), ("--features", args.features)):
        if value < 1:
            raise _error(f"{flag} {value}: must be ≥ 1")
    for flag, tol in (("--rtol", args.rtol), ("--atol", args.atol)):
        if not tol >= 0:
            raise _error(f"{flag} {tol}: must be ≥ 0")
    source: str = args.source
    out = _check_output(source, args.output)
    torch_kw: dict[str, Any] = {"dynamo": not args.legacy, "keep_batchnorm": args.keep_batchnorm}
    common: dict[str, Any] = {"opset": args.opset, "verify": not args.no_verify, "rtol": args.rtol,
                              "atol": args.atol}
    try:
        if source.startswith("ref:"):
            framework, _, arch = source[len("ref:"):].partition("/")
            if args.input:
                raise _error("--input is for FILE.py:FACTORY models; a reference model has its own inputs")
            if args.framework and args.framework != framework:
                raise _error(f"--framework {args.framework} contradicts {source}")
            _flags_fit(args, framework)
            try:
                model = build_native(framework, arch, batch=args.batch, seq=args.seq, features=args.features,
                                     seed=args.seed)
            except ValueError as e:
                raise _error(f"{source}: {e} (ref:FRAMEWORK/ARCH)") from None
            kw = {**common, **(torch_kw if framework == "torch" else {})}
            if args.static:
                kw["dynamic"] = {}
            result = export_native(model, out, **kw)
        elif Path(source).is_dir():
            if args.framework not in (None, "tf"):
                raise _error(f"{source}: a directory is read as a TF SavedModel, not a {args.framework} model")
            _flags_fit(args, "tf")
            inputs, dynamic = _inputs(args) if args.input else _saved_model_inputs(Path(source), args)
            result = export_tf(source, inputs, out, dynamic={} if args.static else dynamic, **common)
        elif ":" in source and source.rpartition(":")[0].endswith(".py"):
            if not args.input:
                raise _error(f"{source}: give the example inputs with --input NAME=DIMS, e.g. --input x=batch,64")
            inputs, dynamic = _inputs(args)
            obj = _load_factory(source)
            file_framework = args.framework or _infer_framework(obj)
            if file_framework is None:
                raise _error(f"{source}: cannot tell the framework of a {type(obj).__name__}; pass --framework")
            _flags_fit(args, file_framework)
            dyn = {} if args.static else dynamic
            if file_framework == "torch":
                result = export_torch(obj, inputs, out, dynamic=dyn, **common, **torch_kw)
            elif file_framework == "tf":
                result = export_tf(obj, inputs, out, dynamic=dyn, **common)
            else:
                result = export_jax(obj, inputs, out, dynamic=dyn, **common)
        elif Path(source).exists():
            raise _error(f"{source}: expected ref:FRAMEWORK/ARCH, FILE.py:FACTORY or a SavedModel directory")
        else:
            raise _error(f"{source}: no such file or directory (expected ref:FRAMEWORK/ARCH, FILE.py:FACTORY "
                         "or a SavedModel directory)")
    except FrameworkMissing as e:
        raise _error(str(e)) from None
    except ExportError as e:
        raise _error(f"{out}: {e} (nothing written)") from None
    sys.stdout.write(f"wrote {result.summary()}\n")
    return 0


def _flags_fit(args: argparse.Namespace, framework: str) -> None:
    if framework != "torch":
        for flag, on in (("--legacy", args.legacy), ("--keep-batchnorm", args.keep_batchnorm)):
            if on:
                raise _error(f"{flag} is for torch models, not {framework}")
