"""Run an environment file as `python <file> <args>` would, as the product runs every environment.

`python -m rl_mcp.children.env_process <env file> serve|process --config X.yaml ...`

Runs (stage env) and rl_test_inference start every environment through this, so a user's own
Atropos file runs unchanged: atroposlib's two silent breakages are fixed first
(`tinker_atropos.env_process.atropos_compat`), and its log gets timestamps and atroposlib's progress lines
("Successfully processed group k/n", which rl_test_inference reads) as soon as a group is scored,
and where the server asks for it, its rollouts' health (scored and discarded groups, the latest
exception, its model requests: timeouts, retries, replies cut at their cap).
This runs in the child process only: the MCP server never imports environment code.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: python -m rl_mcp.children.env_process <environment file> <command> [flags]")
    from tinker_atropos.env_process import atropos_compat, health, logs
    from tinker_atropos.env_process.timeout_fitter import policy_of
    from tinker_atropos.run_files import ENV_HEALTH_VAR

    env_file = Path(argv[0]).resolve()
    sys.argv = [str(env_file), *argv[1:]]
    sys.path.insert(0, str(env_file.parent))  # what `python <file>` does: sibling imports work
    logs.configure()
    atropos_compat.apply()
    health_file = os.environ.get(ENV_HEALTH_VAR)
    if health_file:
        health.install(Path(health_file), policy_of(argv))
    runpy.run_path(str(env_file), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
