"""OpenEnv environments through rl-mcp's own tools: folders under an env dir (a typed one `openenv
init` made, an MCPEnvironment, one built on reasoning-gym's tasks) listed as `openenv:<name>`, each
installed into a venv of its own layered on the OpenEnv venv, scored by rl_test_inference (the typed
one's action taken as the model's plain reply, `action_mode` text), trained two steps and exported;
Hub and Docker sources, a folder without its app and one whose pins conflict with the OpenEnv venv's
refused with what to do; no server left running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from mcp import Client
from openenv_envs import OPENENV_VENV, items_file, mcp_env, reasoning_gym_env, server_folder, typed_env
from test_diagnosis_openenv import never_acting
from test_runs_mcp import call, environ, serving, wait_status
from tiny_profiles import on_tiny_chat

from rl_mcp.environments.discovery import Discovery
from rl_mcp.formats.base import Places
from rl_mcp.settings import BUNDLED_ENV_DIR
from tinker_atropos.openenv.folder import read_openenv_folder
from tinker_atropos.openenv.servers import start_servers, stop_all
from tinker_atropos.venvs import OPENENV

pytestmark = [pytest.mark.anyio]
# tiny-chat spends a token per character: room for the action's schema and two short turns
EDITS = {
    "max_token_length": 2048,
    "max_turn_tokens": 24,
    "max_agent_turns": 2,
    "group_size": 2,
    "batch_size": 2,
    "ensure_scores_are_not_same": False,  # tiny-chat never reverses the word: every episode scores 0
}


def leftover_servers(root: Path) -> list[str]:
    """OpenEnv servers still running for this test's folders (another test's may run beside it)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if "openenv/serve.py" in line and str(root) in line and p.status() != psutil.STATUS_ZOMBIE:
            out.append(line)
    return out


def env_dir(root: Path) -> Path:
    """An env dir with a typed environment, an MCP one, one on reasoning-gym, a folder whose pins
    conflict with the OpenEnv venv's and one whose openenv.yaml names no app."""
    envs = root / "envs"
    envs.mkdir()
    typed_env(envs)
    mcp_env(envs)
    reasoning_gym_env(envs)
    server_folder(envs, "pinned", {"app.py": "app = None\n"}, ["fastmcp==2.12.5"])  # would replace OpenEnv's fastmcp
    broken = envs / "broken"
    broken.mkdir()
    (broken / "openenv.yaml").write_text("spec_version: 1\nname: broken\nruntime: fastapi\n")
    return envs


def servers_file(root: Path, **own: str) -> Path:
    """A Hub Space and a Docker image (refused here), and the user's own servers by URL."""
    path = root / "openenv-servers.json"
    servers = {
        "space": {"url": "https://huggingface.co/spaces/openenv/echo_env"},
        "image": {"docker": "registry.hf.space/openenv-echo-env:latest"},
        **{name: {"url": url} for name, url in own.items()},
    }
    path.write_text(json.dumps({"servers": servers}))
    return path


def serving_env(rl_home: Path, **own: str) -> dict[str, str]:
    root = rl_home.parent
    return environ(
        rl_home,
        RL_MCP_ENV_DIRS=str(env_dir(root)),
        RL_MCP_OPENENV_SERVERS=str(servers_file(root, **own)),
        RL_MCP_PROFILE=str(on_tiny_chat("smollm2", root)),
    )


async def train(client: Client, name: str, **edits: object) -> dict:
    """Selected, edited, scored by rl_test_inference and trained two steps: the sample trajectory and
    the finished run's status."""
    await call(client, "rl_select_environment", name=name)
    for field, value in {**EDITS, "total_steps": 2, "eval_fraction": 0.25, **edits}.items():
        await call(client, "rl_edit_config", field=field, value=value)
    tested = (await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=600))["results"][0]
    assert tested["status"] == "ok", (tested["error"], tested["log_tail"])
    started = await call(client, "rl_start_training")
    done = await wait_status(client, started["run_id"], {"completed", "failed", "stopped", "lost"}, 900)
    assert done["status"] == "completed", (done["error"], done["failure_log_tail"])
    assert all(p["state"] == "exited" for p in done["processes"]), done["processes"]
    return {"trajectory": tested["sample_trajectory"], "run_id": started["run_id"]}


async def test_folders_are_listed_refused_with_what_to_do_or_trained_and_exported(rl_home: Path) -> None:
    async with serving(serving_env(rl_home)) as (_, server), Client(server) as client:
        listed = {e["name"]: e for e in (await call(client, "rl_list_environments"))["environments"]}
        assert {"openenv:word_reverse", "openenv:product", "openenv:leg_counting", "openenv:space"} <= set(listed)
        assert "openenv" not in listed and listed["openenv:word_reverse"]["format"] == "openenv"
        assert "names no app" in listed["openenv:broken"]["description"]
        assert "clone the Space" in listed["openenv:space"]["description"]
        refusals = (
            ("openenv:broken", "names no app"),
            ("openenv:image", "a Docker image"),
            ("openenv:pinned", "fastmcp"),
        )
        for name, why in refusals:  # at the selection (the folder installed first), else at the first test
            refused = await client.call_tool("rl_select_environment", {"name": name})
            if not refused.is_error:
                refused = await client.call_tool("rl_test_inference", {"num_steps": 1, "group_size": 2})
            assert refused.is_error and why in refused.content[0].text, refused.content  # type: ignore[union-attr]
        assert (
            "conflicts with fastmcp==" in refused.content[0].text and "Nothing was installed" in refused.content[0].text
        )  # type: ignore[union-attr]

        selected = await call(client, "rl_select_environment", name="openenv:word_reverse")
        fields = {f["name"]: f for f in selected["config"]["fields"]}
        assert {"items_file", "step_timeout_s", "max_agent_turns", "max_concurrent_sessions"} <= set(fields)
        assert not {"openenv_folder", "openenv_url", "openenv_python"} & set(fields)
        action_mode = fields["action_mode"]
        assert action_mode["value"] is None and "null: text where the action fits" in action_mode["description"]
        assert action_mode["constraints"] == {"enum": ["tool", "text"], "nullable": True}
        edits = (("step_timeout_s", 0), ("max_concurrent_sessions", 0), ("eval_fraction", 1.5), ("action_mode", "json"))
        for field, value in edits:
            refused = await client.call_tool("rl_edit_config", {"field": field, "value": value})
            assert refused.is_error, (field, value)
        # no_tool_calls' next steps on an OpenEnv run are edits this environment takes: the last, its text action
        for mode in (None, "tool"):
            step = never_acting(mode)
            await call(client, step.tool, **step.arguments)
        await call(client, "rl_edit_config", field="sft", value=None)
        words = items_file(
            rl_home.parent / "words.jsonl", *({"reset": {"word": w}} for w in ("drawer", "live", "reed", "stop"))
        )
        run = await train(client, "openenv:word_reverse", items_file=str(words))
        assert "Reverse the word" in run["trajectory"] and '[TEXT ACTION] {"answer": ' in run["trajectory"]
        record = json.loads((rl_home / "env-venvs" / "openenv-word-reverse" / "rl-mcp-install.json").read_text())
        assert record["format"] == "openenv" and record["parent_python"].endswith("/openenv/bin/python")
        exported = await call(client, "rl_export_model", run_id=run["run_id"], format="adapter")
        assert exported["check"]["matches"] >= exported["check"]["required"] >= 1, exported
    assert leftover_servers(rl_home.parent) == []


@pytest.mark.parametrize("name", ["mine", "leg_counting"])
async def test_a_server_by_url_and_an_environment_on_reasoning_gym_train(rl_home: Path, name: str) -> None:
    """The MCP environment as the user's own running server, named by URL (its tools from
    list_tools); reasoning-gym's problems from the environment's own Task API (no items file)."""
    folder = read_openenv_folder(mcp_env(rl_home.parent))
    own = await start_servers(str(OPENENV_VENV / "python"), folder, 4, rl_home.parent, 60) if name == "mine" else []
    try:
        mine = {"mine": own[0].url} if own else {}
        async with serving(serving_env(rl_home, **mine)) as (_, server), Client(server) as client:
            if name == "mine":
                products = items_file(
                    rl_home.parent / "products.jsonl", *({"reset": {"a": a, "b": 7}} for a in range(2, 7))
                )
                run = await train(client, "openenv:mine", items_file=str(products))
                assert "times 7? Submit the product." in run["trajectory"]
            else:
                run = await train(client, "openenv:leg_counting")
                assert "how many legs" in run["trajectory"]
    finally:
        await stop_all(own)
    assert leftover_servers(rl_home.parent) == []


def test_an_installed_openenv_distribution_is_listed_and_runs_as_installed(tmp_path: Path) -> None:
    """An `openenv-*` distribution installed in the OpenEnv venv that carries its openenv.yaml."""
    source = tmp_path / "src"
    package = source / "installed_echo"
    (package / "server").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "server" / "__init__.py").write_text("")
    (package / "server" / "app.py").write_text("app = None\n")
    (package / "openenv.yaml").write_text(
        "name: installed_echo\ndescription: an echo, installed\napp: server.app:app\n"
    )
    (source / "pyproject.toml").write_text(
        '[project]\nname = "openenv-installed-echo"\nversion = "0.1.0"\n'
        '[tool.setuptools]\npackages = ["installed_echo", "installed_echo.server"]\n'
        '[tool.setuptools.package-data]\ninstalled_echo = ["openenv.yaml"]\n'
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps"]
    subprocess.run([*pip, str(source)], check=True, capture_output=True)
    found = Discovery((BUNDLED_ENV_DIR,), Places(environ={OPENENV.venv_var: str(venv)})).scan().environments
    info = found["openenv:installed_echo"]
    assert info.format == "openenv" and info.package is None and info.description == "an echo, installed"
    assert info.entry is not None and info.entry.folder == next(venv.glob("lib/python3*/site-packages/installed_echo"))
    # OpenEnv's own distribution carries its `openenv init` template's openenv.yaml: not an environment
    ours = Discovery((BUNDLED_ENV_DIR,), Places(environ={OPENENV.venv_var: str(OPENENV_VENV.parent)})).scan()
    ours = ours.environments
    assert not [name for name in ours if name.startswith("openenv:")]
