"""Hermes as a real client: hermes-agent[mcp,acp]==0.19.0 from PyPI, the product's `hermes` runtime (`make hermes`),
HERMES_HOME in a temp dir with examples/hermes/config.yaml, then `hermes mcp test rl` and
tests/hermes_drive.py through Hermes' own MCP tool layer (its mcp 1.x client: the 2025 protocol).

Skipped only when `.runtimes/hermes` is absent (`make hermes` installs it; `make test` depends on it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HERMES_VENV = ROOT / ".runtimes" / "hermes"  # the runtime `mcp-server-rl setup hermes` makes
HERMES_PYTHON = HERMES_VENV / "bin" / "python"
HERMES = HERMES_VENV / "bin" / "hermes"
RL_MCP = Path(sys.executable).with_name("mcp-server-rl")  # the console script the example config names
SKILL = ROOT / "examples" / "hermes" / "skills" / "rl-training"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not HERMES_PYTHON.exists(), reason="Hermes not installed: `make hermes` installs it"),
]


def hermes_home(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A Hermes home whose config.yaml is the example's, resolved for this checkout, plus `rl_paid`."""
    home = tmp_path / "hermes-home"
    home.mkdir()
    example = yaml.safe_load((ROOT / "examples" / "hermes" / "config.yaml").read_text())
    rl = example["mcp_servers"]["rl"]  # the uvx entry's settings, launched as the checkout's entry is
    rl.update(command=str(RL_MCP), args=example["mcp_servers"]["rl_checkout"]["args"])
    env = dict(rl["env"])
    env["RL_MCP_HOME"] = str(tmp_path / "rl-home")
    env["RL_MCP_ENV_DIRS"] = str(ROOT / "examples" / "custom_env")
    env.update(RL_MCP_STATUS_MIN_INTERVAL="0", HF_HUB_OFFLINE="1", WANDB_MODE="disabled")
    if os.environ.get("PYTHONPATH"):  # a checkout tested through another checkout's venv
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    for key in ("TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY"):
        assert env[key] == f"${{{key}}}", "the example keeps every key line"
    rl["env"] = env
    paid = {
        **rl,
        "env": {
            **env,
            "RL_MCP_HOME": str(tmp_path / "rl-home-paid"),
            "RL_MCP_PROFILE": "tinker",
            "TINKER_API_KEY": "tml-not-a-real-key",
        },
    }
    config = {**example, "mcp_servers": {"rl": rl, "rl_paid": paid}}
    (home / "config.yaml").write_text(yaml.safe_dump(config))
    shutil.copytree(SKILL, home / "skills" / SKILL.name)
    # Hermes resolves ${VAR} from the process environment: none of the keys is set here.
    process_env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    process_env.update(HERMES_HOME=str(home), PYTHONPATH="", NO_COLOR="1")
    return home, process_env


def test_hermes_mcp_test_lists_the_seventeen_tools_and_the_skill_loads(tmp_path: Path) -> None:
    home, env = hermes_home(tmp_path)
    out = subprocess.run([str(HERMES), "mcp", "test", "rl"], env=env, capture_output=True, text=True, timeout=120)
    assert "Tools discovered: 17" in out.stdout, out.stdout + out.stderr
    tools = ("rl_list_environments", "rl_start_training", "rl_test_inference", "rl_list_runs", "rl_export_model")
    for tool in (*tools, "rl_compare_runs", "rl_serve_model"):
        assert tool in out.stdout
    skill = subprocess.run(
        [str(HERMES_PYTHON), "-c", "from tools.skills_tool import skill_view; print(skill_view('rl-training'))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "mcp__rl__rl_check_status" in skill.stdout and "next_check_in_seconds" in skill.stdout, skill.stderr


def test_hermes_trains_a_local_run_and_is_asked_before_a_paid_one(tmp_path: Path) -> None:
    home, env = hermes_home(tmp_path)
    out = subprocess.run(
        [str(HERMES_PYTHON), str(ROOT / "tests" / "hermes_drive.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        cwd=tmp_path,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads(lines[-1])
    assert report.get("ok"), json.dumps(report, indent=1) + out.stderr[-3000:]
    seen = report["seen"]
    assert seen["status"]["status"] == "completed" and seen["results"]["steps_completed"] == 2
    # The unset ${TINKER_API_KEY} was treated as unset: the keyless default profile, one warning on stderr.
    assert seen["profile"] == "smollm2"
    stderr = (home / "logs" / "mcp-stderr.log").read_text(errors="replace")
    assert "TINKER_API_KEY is an unexpanded ${...} placeholder" in stderr
    assert "tml-not-a-real-key" not in stderr  # no key is ever echoed
    # A paid start was shown its token budget and, declined, started nothing.
    assert "2,621,440,000 tokens" in seen["paid_start"]["asked"][0]
