"""The one place graphcost makes an onnxruntime session: quietly, so that a refused model costs one line.

onnxruntime reports a failure twice: its C++ logger writes a coloured line straight to stderr (a kernel that fails
is logged at ERROR before the run raises), and then it raises an exception with the same text. graphcost turns
the exception into its own one-line message, so the log line is noise in front of it. Sessions made here log
only FATAL (``QUIET_SEVERITY``), on the session and on ORT's process-wide default logger; the numpy
RuntimeWarnings and Python warnings raised while a session loads or runs are silenced for the duration
(:func:`quiet`). Nothing is lost: the exception still carries the reason.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from graphcost.load import display_path, external_files, load

QUIET_SEVERITY = 4
"""ORT's FATAL. ERROR (3) still prints a failed kernel's status before the exception that carries it."""
CPU = ("CPUExecutionProvider",)

_default_logger_quiet = False


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Python warnings and numpy floating-point warnings off while ORT loads or runs a model."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


def options() -> Any:
    """Fresh ``SessionOptions`` that log only FATAL (callers add their own settings)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = QUIET_SEVERITY
    return so


def session(model: str | bytes | os.PathLike[str], so: Any = None, providers: Sequence[str] = CPU) -> Any:
    """``ort.InferenceSession(model, so, providers)`` with ORT's logging and Python's warnings kept quiet.

    ``so`` is used as given except for its log severity, which is raised to ``QUIET_SEVERITY``. Exceptions are
    onnxruntime's own: callers turn them into their one line.
    """
    import onnxruntime as ort

    global _default_logger_quiet
    if not _default_logger_quiet:
        ort.set_default_logger_severity(QUIET_SEVERITY)  # process-wide: provider and environment messages
        _default_logger_quiet = True
    so = options() if so is None else so
    so.log_severity_level = QUIET_SEVERITY
    source = model if isinstance(model, bytes) else _openable(os.fspath(model))
    with quiet():
        return ort.InferenceSession(source, so, providers=list(providers))


def _openable(path: str) -> str | bytes:
    """``path``, or the model's bytes when onnxruntime cannot take the name.

    onnxruntime takes a path as UTF-8 text, and a POSIX file name that is not UTF-8 (kept by Python as lone
    surrogates) fails its encode. Such a model is handed over as bytes, which only works when it names no
    external data (ORT resolves those beside the model's path); otherwise the refusal says what to do.
    """
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        pass
    if external_files(load(path).proto, path):
        raise ValueError(f"{display_path(path)}: onnxruntime cannot open a model whose file name is not UTF-8 "
                         "when its weights are in external data files; rename it")
    with open(path, "rb") as f:
        return f.read()


def run(sess: Any, outputs: Sequence[str] | None, feeds: Mapping[str, Any]) -> list[Any]:
    """``sess.run(outputs, feeds)`` with warnings quiet; a run logs at its session's severity (quiet when the
    session came from :func:`session`). Timing loops wrap themselves in :func:`quiet` once instead."""
    with quiet():
        return list(sess.run(None if outputs is None else list(outputs), dict(feeds)))


__all__ = ["QUIET_SEVERITY", "options", "quiet", "run", "session"]
