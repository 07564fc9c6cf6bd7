"""Where a command's output goes: the one output-path guard (no command writes over its own inputs) and the
atomic write of a report to ``--output FILE`` or stdout.

Every command that writes a file (``analyze``/``bench``/``gap``/``compare -o``, ``fold -o``, ``export -o``,
``hardware detect|measure -o``, ``audit --out``) asks :func:`check_output` first, before it runs anything, with
the files it reads: the model and every external-data file the model names (:func:`protected_paths`), a
``--hardware FILE.toml`` spec (:func:`hardware_input`), an export's source. A path is refused when it

- names a protected file, or resolves to one (``..``, a symlink, a symlinked folder: ``os.path.realpath``);
- is the same file under another name (a hard link: same ``(st_dev, st_ino)``, ``os.path.samefile``);
- is an existing directory, FIFO (opening it would block until a reader comes), block device or socket.

A character device (``-o /dev/null``, a terminal) is allowed: it is written in place, never replaced. Every other
output is written atomically by :func:`write_output` (a temporary file beside it, then ``os.replace``).

The refusal is an :class:`OutputPathError` (a ``ValueError``) with one line naming the flag, the path and the
input it would destroy; :func:`guard` turns it into the CLI's one-line exit-2 error.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from typing import Union

from graphcost.cli.flags import CliError

Protected = Union[Mapping[str, str], Iterable[str], Callable[[], Union[Mapping[str, str], Iterable[str]]]]
"""Input paths (mapped to what each is, for the message), or a function that finds them when needed."""

MODEL = "the input model"
HARDWARE = "the --hardware spec file"


class OutputPathError(ValueError):
    """An output path that would overwrite an input, or that cannot be a plain file; one human line."""


def protected_paths(model_path: str | os.PathLike[str],
                    output: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The model file and every external-data file it names, each mapped to what it is (for the message).

    The structure is read with :func:`graphcost.load.load` (weight payloads are never read); a model that cannot
    be loaded protects just its own path: the command that wanted it fails before writing anything. Given the
    ``output`` that is to be checked, the load is skipped when that file cannot be an external-data file
    (:func:`_may_hold_weights`): synthetic-100k's ``analyze -o existing.json`` read the structure twice, 0.8 s.
    """
    path = os.fspath(model_path)
    out = {path: MODEL}
    if output is not None and not _may_hold_weights(output, path):
        return out
    # lazy: graphcost.load imports onnx (0.26 s); only a command given -o FILE needs it
    from graphcost.load import LoadError, external_files, load

    try:
        targets = external_files(load(path).proto, path)
    except (LoadError, OSError, ValueError):
        return out
    for target in targets:
        out.setdefault(target, f"{MODEL}'s external data file {os.path.basename(target)!r}")
    return out


def _may_hold_weights(output: str | os.PathLike[str], model_path: str) -> bool:
    """Whether the existing file ``output`` could be one of the model's external-data files.

    Those always lie inside the model's real folder (``_scan.external_data_path`` refuses any location that
    resolves elsewhere), so a file whose real path is outside that folder and that has no other name (one hard
    link) is none of them. Anything else (inside the folder, a second hard link, a stat that fails) may be."""
    try:
        st = os.stat(output)
    except OSError:
        return True
    if st.st_nlink > 1:
        return True
    folder = os.path.dirname(os.path.realpath(model_path))
    try:
        return os.path.commonpath([folder, os.path.realpath(output)]) == folder
    except ValueError:  # Windows: another drive
        return False


def hardware_input(hardware: str | None) -> dict[str, str]:
    """``--hardware FILE.toml`` as a protected input (a catalog name or ``detect``/``measured`` is no file)."""
    if hardware and os.path.isfile(hardware):
        return {hardware: HARDWARE}
    return {}


def check_output(output: str | os.PathLike[str], protected: Protected = (), *, flag: str = "--output") -> None:
    """Raise :class:`OutputPathError` when writing ``output`` could destroy a protected input, or is no plain file.

    ``protected`` maps each input path to what it is (``"the input model"``); a plain iterable of paths is
    described as "the input PATH"; a callable returning either is called only when ``output`` already exists as
    a regular file (a path that does not exist yet cannot be an input), so ``-o new.txt`` costs no model load.
    """
    out = os.fspath(output)
    where = f"{flag} {out}"
    try:
        st: os.stat_result | None = os.stat(out)  # follows symlinks: what the write would reach
    except FileNotFoundError:
        st = None  # a new file (or a dangling symlink: the atomic write replaces the link, not a target)
    except OSError as e:
        raise OutputPathError(f"{where}: cannot write ({e.strerror or e})") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputPathError(f"{where}: is a directory; give a file name")
    if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        kind = "a FIFO (the write would wait for a reader)" if stat.S_ISFIFO(st.st_mode) else \
            "a block device" if stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else \
            "not a regular file"
        raise OutputPathError(f"{where}: is {kind}; give a file name, or leave out the flag to write to stdout")
    if st is None or not stat.S_ISREG(st.st_mode):
        return  # nothing on disk to destroy (a new file), or a character device, written in place
    if callable(protected):
        protected = protected()  # only now: finding a model's weights costs a structure load
    items = protected.items() if isinstance(protected, Mapping) else ((p, f"the input {p}") for p in protected)
    real = os.path.realpath(out)
    for path, what in items:
        if real == os.path.realpath(path) or _same_inode(st, path):
            raise OutputPathError(f"{where}: refusing to overwrite {what}")


def guard(output: str | os.PathLike[str] | None, protected: Protected = (), *, flag: str = "--output") -> None:
    """:func:`check_output` for a CLI command: no output is fine, a refusal is a one-line exit-2 ``CliError``."""
    if output is None or os.fspath(output) == "":
        return
    try:
        check_output(output, protected, flag=flag)
    except OutputPathError as e:
        raise CliError(str(e)) from None


def write_output(output: str | None, text: str | Iterable[str]) -> None:
    """A report (one string, or its pieces in order) to ``--output FILE`` (one-line error when it cannot be
    written) or to stdout.

    The file is written atomically: a temporary file beside the target (the symlink's target when FILE is a
    symlink), then ``os.replace``, so a failed run never leaves a truncated report, a hard link to FILE keeps its
    old content, and a FIFO is refused rather than opened (a character device such as /dev/null is written in
    place). Callers check FILE against their inputs first (:func:`guard`), before they run
    anything.
    """
    pieces = (text,) if isinstance(text, str) else text
    if not output:
        sys.stdout.writelines(pieces)
        return
    guard(output)  # a directory, FIFO, block device or socket: refused here too, whatever the caller checked
    target = os.path.realpath(output)
    try:
        st = os.stat(target)
    except OSError:
        st = None
    if st is not None and stat.S_ISCHR(st.st_mode):  # -o /dev/null, a terminal: written in place, never replaced
        try:
            with open(target, "w", encoding="utf-8") as f:
                f.writelines(pieces)
        except OSError as e:
            raise CliError(f"--output {output}: cannot write ({e.strerror or e})") from None
        return
    mode = st.st_mode & 0o7777 if st is not None else 0o666 & ~_umask()  # an existing report keeps its mode
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                                   dir=os.path.dirname(target))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(pieces)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as e:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise CliError(f"--output {output}: cannot write ({e.strerror or e})") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _same_inode(st: os.stat_result, path: str) -> bool:
    try:
        other = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino)


__all__ = ["HARDWARE", "MODEL", "OutputPathError", "check_output", "guard", "hardware_input", "protected_paths",
           "write_output"]
