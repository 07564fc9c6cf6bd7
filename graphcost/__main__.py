"""``python -m graphcost``: the ``graphcost`` command (``graphcost.cli.entry``)."""

from graphcost.cli import entry

entry()
