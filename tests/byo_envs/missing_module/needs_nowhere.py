"""An Atropos file importing a module installed nowhere (rl-mcp's tests: its import error is named)."""

import rl_mcp_test_nowhere_module  # noqa: F401
from atroposlib.envs.base import BaseEnv


class NeedsNowhereEnv(BaseEnv):
    name = "needs_nowhere"


if __name__ == "__main__":
    NeedsNowhereEnv.cli()
