"""`python -m rl_mcp` is `rl-mcp`."""

from .cli import main

raise SystemExit(main())
