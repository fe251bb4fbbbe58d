"""examples/ and `mcp-server-rl demo`: the client configs start a working server, the custom environment's
own tests pass, the walkthrough names only real tools, and the demo runs the whole workflow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from uv import find_uv_bin

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RL_MCP = Path(sys.executable).with_name(PROJECT["name"])  # the console script of the venv under test
SECRET_NAMES = ("TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY", "RL_MCP_AUTH_TOKEN")
ALL_TOOLS = {
    "rl_list_environments", "rl_select_environment", "rl_get_current_config", "rl_edit_config",
    "rl_test_inference", "rl_start_training", "rl_check_status", "rl_stop_training",
    "rl_get_results", "rl_list_runs", "rl_export_model", "rl_compare_runs",
}  # fmt: skip


def _resolve_placeholders(value: str, home: Path) -> str:
    return (
        value.replace("/ABSOLUTE/PATH/TO/rl-mcp/.venv/bin/mcp-server-rl", str(RL_MCP))
        .replace("/ABSOLUTE/PATH/TO/YOUR/ENVIRONMENTS", str(EXAMPLES / "custom_env"))
        .replace("/ABSOLUTE/PATH/TO/rl-mcp", str(ROOT))
        .replace("/ABSOLUTE/PATH/TO/HOME", str(home))
        .replace("${userHome}", str(home))
        .replace("${HOME}", str(home))
    )


async def _environment_names(command: str, args: list[str], env: dict[str, str]) -> set[str]:
    """Start the server as the client config says and ask it for its environments over stdio."""
    params = StdioServerParameters(command=command, args=args, env=env)
    async with Client(params, read_timeout_seconds=120) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"rl_list_environments", "rl_start_training"} <= tools
        listing = await client.call_tool("rl_list_environments", {})
        assert not listing.is_error, listing.content
        return {e["name"] for e in listing.structured_content["environments"]}


# What a user's session hands a launched server beside the config's `env`: where uv finds a Python,
# and this machine's certificate authorities (its registry traffic is inspected)
MACHINE = {k: os.environ[k] for k in ("PATH", "SSL_CERT_FILE", "SSL_CERT_DIR") if k in os.environ}


def _uvx_from_checkout(command: str, args: list[str]) -> tuple[str, list[str]]:
    """`uvx NAME ...` as the registry would launch it, from this checkout (uvx --from <folder>: it
    builds and installs the package, nothing published): NAME is the package's, and its command's."""
    assert (command, args[0]) == ("uvx", PROJECT["name"]), (command, args)
    return find_uv_bin(), ["tool", "run", "--from", str(ROOT), *args]


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["rl-mcp", "rl-mcp-checkout"])
async def test_claude_desktop_config_starts_a_working_server(tmp_path: Path, name: str) -> None:
    servers = json.loads((EXAMPLES / "claude_desktop_config.json").read_text())["mcpServers"]
    assert list(servers) == ["rl-mcp", "rl-mcp-checkout"], "the uvx launch line first, the checkout's second"
    entry = servers[name]
    assert not set(entry["env"]) & set(SECRET_NAMES), "secrets do not belong in the client config"

    env = {k: _resolve_placeholders(v, tmp_path) for k, v in entry["env"].items()}
    args = [_resolve_placeholders(a, tmp_path) for a in entry["args"]]
    command = _resolve_placeholders(entry["command"], tmp_path)
    if name == "rl-mcp":
        command, args = _uvx_from_checkout(command, args)
        env.update(MACHINE)
    else:
        assert entry["command"].endswith("/.venv/bin/mcp-server-rl") and entry["args"][0] == "serve"
    names = await _environment_names(command, args, env)
    assert {"letter_repeat", "gsm8k_tinker", "word_shout"} <= names
    assert (tmp_path / ".rl-mcp" / "server.log").exists(), "--log-file from the config was honoured"


@pytest.mark.anyio
async def test_hermes_config_starts_a_working_server(tmp_path: Path) -> None:
    servers = yaml.safe_load((EXAMPLES / "hermes" / "config.yaml").read_text())["mcp_servers"]
    assert list(servers)[:2] == ["rl", "rl_checkout"], "the uvx launch line first, the checkout's second"
    assert servers["rl_checkout"]["enabled"] is False and servers["rl_checkout"]["command"].endswith(
        "/bin/mcp-server-rl"
    )
    entry = servers["rl"]
    for name in SECRET_NAMES:  # keys only by reference, resolved by Hermes from ~/.hermes/.env
        assert entry["env"].get(name, f"${{{name}}}") == f"${{{name}}}"
    assert servers["rl_http"]["headers"]["Authorization"] == "Bearer ${RL_MCP_AUTH_TOKEN}"
    assert servers["rl_http"]["url"].endswith("/mcp")

    # The key lines stay as Hermes passes them when the keys are unset: literal ${NAME} placeholders.
    env = {k: _resolve_placeholders(v, tmp_path) for k, v in entry["env"].items()}
    assert env["TINKER_API_KEY"] == "${TINKER_API_KEY}"
    command, args = _uvx_from_checkout(entry["command"], entry["args"])
    names = await _environment_names(command, args, {**env, **MACHINE})
    assert "word_shout" in names
    assert (tmp_path / ".rl-mcp").is_dir()


def test_inspector_script(tmp_path: Path) -> None:
    script = EXAMPLES / "inspector.sh"
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)
    if not (ROOT / ".ci/node/node_modules/.bin/mcp-inspector").exists() and not os.environ.get("CI"):
        pytest.skip("MCP Inspector not installed (`make inspector` installs it)")
    out = subprocess.run(
        [str(script), "--method", "tools/list"],
        env={**os.environ, "RL_MCP_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    listed = {t["name"] for t in json.loads(out.stdout)["tools"]}
    assert ALL_TOOLS <= listed
    assert (tmp_path / "runs.sqlite").is_file()  # RL_MCP_HOME reached the server through the Inspector


def test_custom_environment_tests_pass() -> None:
    """The example environment ships its own tests; run them as a user would."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLES / "custom_env")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", out.stdout)


def test_server_json_describes_the_package_as_built() -> None:
    """The MCP Registry's entry: this package and version (pyproject.toml's, the one place it is set),
    launched by uvx over stdio; every key the server reads marked secret, none other."""
    project = PROJECT
    described = json.loads((ROOT / "server.json").read_text())
    assert described["$schema"].endswith("/2025-12-11/server.schema.json")
    (package,) = described["packages"]
    assert (package["registryType"], package["identifier"], package["runtimeHint"]) == ("pypi", project["name"], "uvx")
    assert described["version"] == package["version"] == project["version"]
    assert package["transport"] == {"type": "stdio"}
    secret = {v["name"] for v in package["environmentVariables"] if v["isSecret"]}
    assert secret == {"TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY", "HF_TOKEN"}
    assert f"mcp-name: {described['name']}" in (ROOT / "README.md").read_text()
    assert described["name"].endswith(f"/{project['name']}"), described["name"]


def test_walkthrough_names_only_real_tools() -> None:
    text = (EXAMPLES / "walkthrough.md").read_text()
    named = set(re.findall(r"\brl_[a-z_]+\b", text))
    assert named <= ALL_TOOLS, f"unknown tools in the walkthrough: {named - ALL_TOOLS}"
    assert ALL_TOOLS <= named, f"tools missing from the walkthrough: {ALL_TOOLS - named}"


def test_progress_line() -> None:
    from rl_mcp.demo import progress_line

    status: dict[str, Any] = {
        "status": "running", "stage": None, "step": 5, "total_steps": 20, "eta_seconds": 30.0,
        "latest": {"reward_mean": 0.4123, "loss": 0.01234},
    }  # fmt: skip
    line = progress_line(status, 12.3)
    assert line.startswith("[" + "#" * 7 + "-" * 23 + "] step 5/20")
    assert "reward 0.412" in line and "loss 0.0123" in line and "running" in line and "(eta 30s)" in line
    assert "step 0/?" in progress_line({"status": "starting", "stage": "api"}, 0.0)


SMALL_DEMO = ["--set", "batch_size=8", "--set", "eval_size=4"]


@pytest.mark.slow
def test_demo_runs_the_whole_workflow(tmp_path: Path) -> None:
    home, plot = tmp_path / "demo-home", tmp_path / "curve.png"
    out = subprocess.run(
        # 2 steps of a group, 4 held-out sums before and after: the whole workflow, a fraction of its compute
        [str(RL_MCP), "demo", "--home", str(home), "--steps", "2", "--plot", str(plot), *SMALL_DEMO],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for step in ("rl_list_environments", "rl_select_environment arithmetic", "rl_edit_config",
                 "rl_test_inference", "rl_start_training", "rl_get_results"):  # fmt: skip
        assert step in out.stdout
    assert plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    weights = re.search(r"^\s*weights\s+(\S+)", out.stdout, re.M)
    assert weights and Path(weights.group(1)).is_dir(), out.stdout
    assert "step 2/2" in out.stderr  # the progress bar reached the end
    assert "batch_size = 8" in out.stdout and "eval_size = 4" in out.stdout
    # SmolLM2 on the held-out sums, before the first step and after the last (the demo's story)
    held_out = re.search(r"^\s*held-out\s+eval accuracy \d\.\d+ \(step 0\) -> \d\.\d+ \(step 2\)", out.stdout, re.M)
    assert held_out, out.stdout
    assert (home / "runs.sqlite").exists() and not (tmp_path / ".demo-home").exists()
