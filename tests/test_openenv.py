"""OpenEnv environments through rl-mcp's own tools: folders under an env dir (one `openenv init`
made) and servers named by URL listed as `openenv:<name>`, a folder installed into a venv of its own
layered on the OpenEnv venv, scored by rl_test_inference and trained; Hub and Docker sources and a
folder without its app refused with what to do; no server left running."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from mcp import Client
from openenv_envs import items_file, mcp_env, typed_env
from test_runs_mcp import call, environ, serving, wait_status
from tiny_profiles import on_tiny_chat

pytestmark = [pytest.mark.anyio]
# tiny-chat spends a token per character: room for the action's schema and two short turns
EDITS = {
    "max_token_length": 2048,
    "max_turn_tokens": 24,
    "max_agent_turns": 2,
    "group_size": 2,
    "batch_size": 2,
    "ensure_scores_are_not_same": False,  # tiny-chat writes no call: every episode scores 0
}


def leftover_servers() -> list[str]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if "openenv/serve.py" in line and p.status() != psutil.STATUS_ZOMBIE:
            out.append(line)
    return out


def env_dir(root: Path) -> Path:
    """An env dir with a typed environment, an MCP one and a folder whose openenv.yaml names no app."""
    envs = root / "envs"
    envs.mkdir()
    typed_env(envs)
    mcp_env(envs)
    broken = envs / "broken"
    broken.mkdir()
    (broken / "openenv.yaml").write_text("spec_version: 1\nname: broken\nruntime: fastapi\n")
    return envs


def servers_file(root: Path) -> Path:
    path = root / "openenv-servers.json"
    servers = {
        "space": {"url": "https://huggingface.co/spaces/openenv/echo_env"},
        "image": {"docker": "registry.hf.space/openenv-echo-env:latest"},
    }
    path.write_text(json.dumps({"servers": servers}))
    return path


async def test_folders_are_listed_installed_tested_and_trained(rl_home: Path) -> None:
    root = rl_home.parent
    env = environ(
        rl_home,
        RL_MCP_ENV_DIRS=str(env_dir(root)),
        RL_MCP_OPENENV_SERVERS=str(servers_file(root)),
        RL_MCP_PROFILE=str(on_tiny_chat("smollm2", root)),
    )
    async with serving(env) as (_, server), Client(server) as client:
        listed = {e["name"]: e for e in (await call(client, "rl_list_environments"))["environments"]}
        assert {"openenv:word_reverse", "openenv:product", "openenv:broken", "openenv:space", "openenv:image"} <= set(
            listed
        )
        assert "openenv" not in listed and listed["openenv:word_reverse"]["format"] == "openenv"
        assert "names no app" in listed["openenv:broken"]["description"]
        assert "clone the Space" in listed["openenv:space"]["description"]
        for name, why in (("openenv:broken", "names no app"), ("openenv:image", "a Docker image")):
            await call(client, "rl_select_environment", name=name)
            refused = await client.call_tool("rl_test_inference", {"num_steps": 1, "group_size": 2})
            assert refused.is_error and why in refused.content[0].text  # type: ignore[union-attr]

        selected = await call(client, "rl_select_environment", name="openenv:word_reverse")
        fields = {f["name"] for f in selected["config"]["fields"]}
        assert {"items_file", "step_timeout_s", "max_agent_turns", "max_concurrent_sessions"} <= fields
        assert not {"openenv_folder", "openenv_url", "openenv_python"} & fields
        for field, value in (("step_timeout_s", 0), ("max_concurrent_sessions", 0), ("eval_fraction", 1.5)):
            refused = await client.call_tool("rl_edit_config", {"field": field, "value": value})
            assert refused.is_error, (field, value)
        items = items_file(
            root / "words.jsonl", *({"reset": {"word": w}} for w in ("drawer", "stressed", "live", "reed"))
        )
        for field, value in {**EDITS, "items_file": str(items), "total_steps": 2, "eval_fraction": 0.25}.items():
            await call(client, "rl_edit_config", field=field, value=value)
        tested = (await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=600))["results"][0]
        assert tested["status"] == "ok", (tested["error"], tested["log_tail"])
        assert "Reverse the word" in tested["sample_trajectory"]
        record = json.loads((rl_home / "env-venvs" / "openenv-word-reverse" / "rl-mcp-install.json").read_text())
        assert record["format"] == "openenv" and record["parent_python"].endswith(".venv-openenv/bin/python")

        started = await call(client, "rl_start_training")
        done = await wait_status(client, started["run_id"], {"completed", "failed", "stopped", "lost"}, 900)
        assert done["status"] == "completed", (done["error"], done["failure_log_tail"])
        assert all(p["state"] == "exited" for p in done["processes"]), done["processes"]
    assert leftover_servers() == []
