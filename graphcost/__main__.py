from graphcost.cli import main

raise SystemExit(main())
