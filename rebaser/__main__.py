from rebaser.cli import main

raise SystemExit(main())
