"""Where the venvs of other formats' code are and how they are made (stdlib only: the server imports
it too).

verifiers' pins conflict with the product's (datasets, regex, openai, mcp) and with each other's
(0.1.14 vs 0.4.0), and OpenEnv's (fastmcp 3, so mcp < 2) with the product's mcp 2: each has a venv of
its own, made by its make target; an environment variable points elsewhere. The environment process
stays on the product's venv and runs a child on the other one (verifiers' child, OpenEnv's server).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Generation:
    """One format's generation: its format name, venv, the command that makes it, the child it runs there."""

    format: str
    venv_var: str
    venv_dir: str
    make_command: str
    pin: str
    size: str
    child_file: Path

    def python(self, environ: Mapping[str, str]) -> Path:
        return Path(environ.get(self.venv_var) or str(PROJECT_ROOT / self.venv_dir)) / "bin" / "python"

    def missing_venv_message(self, environ: Mapping[str, str]) -> str | None:
        """Why its environments cannot run here, with the command that fixes it; None if they can."""
        python = self.python(environ)
        if python.exists():
            return None
        return (
            f"{self.format} environments run in a venv of their own, and {python} does not exist: run "
            f"`{self.make_command}` in {PROJECT_ROOT} ({self.size}), or point {self.venv_var} at a venv "
            f"with {self.pin}"
        )


CLASSIC = Generation(
    format="verifiers",
    venv_var="RL_MCP_VERIFIERS_VENV",
    venv_dir=".venv-verifiers",
    make_command="make verifiers",
    pin="verifiers==0.1.14",
    size="about 1 minute, 700 MB",
    child_file=Path(__file__).with_name("verifiers") / "classic_child.py",
)
V1 = Generation(
    format="verifiers-v1",
    venv_var="RL_MCP_VERIFIERS_V1_VENV",
    venv_dir=".venv-verifiers-v1",
    make_command="make verifiers-v1",
    pin="verifiers==0.4.0",
    size="about 2 minutes, 600 MB",
    child_file=Path(__file__).with_name("verifiers") / "v1_child.py",
)
OPENENV = Generation(
    format="openenv",
    venv_var="RL_MCP_OPENENV_VENV",
    venv_dir=".venv-openenv",
    make_command="make openenv",
    pin="openenv==0.10.0",
    size="about 1 minute, 480 MB",
    child_file=Path(__file__).with_name("openenv") / "serve.py",
)
GENERATIONS = {g.format: g for g in (CLASSIC, V1, OPENENV)}


def verifiers_venvs(environ: Mapping[str, str]) -> dict[str, Path]:
    """Each verifiers API generation's format -> the Python of its venv (discovery lists what is installed there)."""
    return {g.format: g.python(environ) for g in (CLASSIC, V1)}
