from firstfault.cli import main

raise SystemExit(main())
