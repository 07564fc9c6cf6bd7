"""``python -m graphcost``: the ``graphcost`` command (``graphcost.cli.main``)."""

from graphcost.cli import main

raise SystemExit(main())
