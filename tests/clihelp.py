"""Run the graphcost CLI in the test's own process (fast; capsys sees its output)."""

from __future__ import annotations

import pytest

from graphcost import cli


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``graphcost ARGS``: (exit code, stdout, stderr)."""
    try:
        code = cli.main(list(args))
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
