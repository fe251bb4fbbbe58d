"""The `mcp` format through rl-mcp's own tools: the user's tool servers (mcp-server-time and
mcp-server-git from PyPI, `make mcp-servers`) listed as environments with the tools their real
sessions report, a server that cannot start listed with its error, tasks written by the agent
through rl_write_mcp_tasks (validated, saved where the user edits them), scored by
rl_test_inference, and a short training run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client
from mcp_tool_servers import SERVERS_VENV, git_repo
from test_runs_mcp import call, environ, serving, wait_status
from tiny_profiles import on_tiny_chat

from tinker_atropos.models.paths import TINY_CHAT

pytestmark = [pytest.mark.anyio]
# tiny-chat spends a token per character: room for the tool prompt and two short turns
EDITS = {"max_token_length": 4096, "max_turn_tokens": 24, "max_agent_turns": 2, "group_size": 2, "batch_size": 2}
TIME_TASKS = [
    {"prompt": f"It is 12:00 in UTC. What time is it in {city}?", "answer": hour, "check": {"contains": True}}
    for city, hour in (("Tokyo", "21:00"), ("Kolkata", "17:30"), ("Kathmandu", "17:45"), ("Anchorage", "03:00"))
] + [
    {
        "prompt": "Convert 09:30 from UTC to Asia/Tokyo time.",
        "check": {"called": "convert_time", "arguments": {"target_timezone": "Asia/Tokyo"}},
    },
    {
        "prompt": "What day of the week is it now in Tokyo?",
        "check": {"final_answer_from": "get_current_time", "field": "day_of_week"},
    },
]


MARK = "RL_MCP_TEST_ROOT"


def tool_servers(root: Path) -> Path:
    repo = git_repo(root, "First commit")
    mine = {MARK: str(root)}  # the servers of this test, among those other workers' tests start
    servers = {
        "time": {"command": str(SERVERS_VENV / "mcp-server-time"), "args": ["--local-timezone", "UTC"], "env": mine},
        "git": {"command": str(SERVERS_VENV / "mcp-server-git"), "args": ["--repository", str(repo)], "env": mine},
        "missing": {"command": str(root / "no-such-server")},
    }
    path = root / "claude_desktop_config.json"  # a client's own config file, named by the variable
    path.write_text(json.dumps({"mcpServers": servers, "otherClientSetting": True}))
    return path


def env_of(rl_home: Path, **extra: str) -> dict[str, str]:
    return environ(rl_home, RL_MCP_TOOL_SERVERS=str(tool_servers(rl_home.parent)), **extra)


def leftover_servers(root: Path) -> list[str]:
    """The tool servers `tool_servers(root)` configured that still run (a run's outlive its server)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        try:
            if str(SERVERS_VENV) in line and p.status() != psutil.STATUS_ZOMBIE and p.environ().get(MARK) == str(root):
                out.append(line)
        except psutil.Error:  # gone meanwhile
            continue
    return out


async def test_servers_are_listed_with_their_tools_and_the_agent_writes_tasks(rl_home: Path) -> None:
    async with serving(env_of(rl_home, RL_MCP_ENV_ERROR_TIMEOUT="20")) as (_, server), Client(server) as client:
        listed = await call(client, "rl_list_environments")
        names = {e["name"]: e for e in listed["environments"]}
        assert {"mcp:time", "mcp:git", "mcp:missing"} <= set(names) and "mcp_tools" not in names
        assert names["mcp:time"]["format"] == "mcp"
        servers = {s["server"]: s for s in listed["tool_servers"]}
        time_tools = {t["name"]: t for t in servers["time"]["tools"]}
        assert set(time_tools) == {"get_current_time", "convert_time"} and servers["time"]["error"] is None
        assert time_tools["convert_time"]["annotations"]["readOnlyHint"] is True
        assert time_tools["convert_time"]["input_schema"]["properties"]["target_timezone"]
        git_tools = {t["name"]: t for t in servers["git"]["tools"]}
        assert git_tools["git_reset"]["destructive"] and not git_tools["git_reset"]["enabled_by_default"]
        assert git_tools["git_log"]["enabled_by_default"] and not git_tools["git_commit"]["enabled_by_default"]
        assert "not found" in servers["missing"]["error"] and servers["missing"]["tools"] == []
        assert listed["tool_servers_file"].endswith("claude_desktop_config.json")

        # the agent writes tasks: every bad one named, nothing saved; then a good set is saved
        bad = await client.call_tool(
            "rl_write_mcp_tasks",
            {
                "server": "time",
                "tasks": [
                    {"prompt": "x", "check": {"called": "no_such_tool"}},
                    {"prompt": "y", "check": {"regex": "("}},
                    {"prompt": "z", "check": {"called": "convert_time", "arguments": {"city": "Paris"}}},
                ],
            },
        )
        text = bad.content[0].text  # type: ignore[union-attr]
        assert bad.is_error and "nothing saved" in text and "task 1: tool 'no_such_tool' is not a tool of" in text
        assert (
            "task 2: `regex` '(' does not compile" in text
            and "task 3: convert_time takes no argument(s) ['city']" in text
        )
        destructive = await client.call_tool(
            "rl_write_mcp_tasks", {"server": "git", "tasks": [{"prompt": "Undo.", "check": {"called": "git_reset"}}]}
        )
        assert destructive.is_error and "never enabled implicitly" in destructive.content[0].text  # type: ignore[union-attr]
        saved = await call(client, "rl_write_mcp_tasks", server="time", tasks=TIME_TASKS)
        assert saved["tasks"] == len(TIME_TASKS) and saved["eval"] >= 1 and Path(saved["path"]).exists()
        assert Path(saved["path"]) == rl_home / "mcp-tasks" / "time.jsonl" and "mcp:time" in saved["next_step"]
        git_tasks = [
            {"prompt": "Which branch is checked out?", "check": {"called": "git_branch"}},
            {"prompt": "Show the last commit message.", "check": {"contains": "First commit"}},
        ]
        await call(client, "rl_write_mcp_tasks", server="git", tasks=git_tasks, eval_fraction=0.0)

        prompt = await client.get_prompt("rl_workflow", {"environment": "mcp:git"})
        assert "rl_write_mcp_tasks" in prompt.messages[0].content.text  # type: ignore[union-attr]

        selected = await call(client, "rl_select_environment", name="mcp:git")
        fields = {f["name"] for f in selected["config"]["fields"]}
        assert {
            "tools",
            "tasks_file",
            "reward",
            "judge_model",
            "tool_timeout_s",
            "max_tool_result_chars",
            "sandbox",
        } <= fields
        assert "mcp_server" not in fields and "tool_servers_file" not in fields
        for field, value in (("reward", "vibes"), ("tool_timeout_s", 0), ("sandbox", "docker")):
            refused = await client.call_tool("rl_edit_config", {"field": field, "value": value})
            assert refused.is_error, (field, value)
        for field, value in EDITS.items():
            await call(client, "rl_edit_config", field=field, value=value)
        # git's tool prompt is past tiny-chat's 4096 tokens (a token per character): refused at start
        # with the length that fits, not rollouts that silently end before their first turn
        refused = (await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=300))["results"][0]
        assert refused["status"] == "failed" and "raise max_token_length to at least" in refused["error"]

        await call(client, "rl_select_environment", name="mcp:time")
        for field, value in EDITS.items():
            await call(client, "rl_edit_config", field=field, value=value)
        tested = await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=600)
        model: dict[str, Any] = tested["results"][0]
        assert model["status"] == "ok", (model["error"], model["log_tail"])
        assert "[USER]" in model["sample_trajectory"] and len(model["reward_reasons"]) == 2
        assert all(": " in r and "check: " in r for r in model["reward_reasons"]), model["reward_reasons"]

        # the judge by default is this run's own inference server: tiny-chat cannot judge, and says so by name
        await call(client, "rl_edit_config", field="reward", value="judge")
        judged = (await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=300))["results"][0]
        assert judged["status"] == "failed" and "judge_" in judged["error"], (judged["status"], judged["error"])
    assert leftover_servers(rl_home.parent) == []


# The smollm2 profile (its locked max_token_trainer_length of 8192) on tiny-chat (tests/tiny_profiles.py),
# whose token per character puts a tool prompt past the local profile's 1024. git's seven read-only
# tools' schemas run to thousands of characters, which crowd those positions: its run offers the
# one tool its task needs (`tools`), as a user narrows a large server to the tools a task is about.
STEPS = {"time": 2, "git": 1}  # time's second step on the first's weights
TRAIN_EDITS = {
    "max_turn_tokens": 48,
    "max_agent_turns": 2,
    "group_size": 2,
    "batch_size": 2,
    "ensure_scores_are_not_same": False,
    "eval_fraction": 0.2,
}


def demonstrated(server: str, repo: Path) -> list[dict[str, Any]]:
    """A task each run can demonstrate (a `called` check with every argument): a real tool result
    in every group, whose tokens must not be trained."""
    if server == "time":
        args = {"source_timezone": "UTC", "time": "09:30", "target_timezone": "Asia/Tokyo"}
        return [
            {
                "prompt": "Convert 09:30 UTC to Tokyo time.",
                "answer": "18:30",
                "check": {"called": "convert_time", "arguments": args},
            }
        ]
    args = {"repo_path": str(repo), "branch_type": "local"}
    return [
        {
            "prompt": f"Which branch is checked out in {repo}?",
            "answer": "main",
            "check": {"called": "git_branch", "arguments": args},
        }
    ]


@pytest.mark.slow
@pytest.mark.parametrize("server", ["time", "git"])
async def test_a_tool_server_environment_trains(rl_home: Path, server: str) -> None:
    from transformers import AutoTokenizer

    from tinker_atropos.models import ensure_model
    from tinker_atropos.run_files import RunFiles

    profile = str(on_tiny_chat("smollm2", rl_home.parent))
    async with serving(env_of(rl_home, RL_MCP_PROFILE=profile)) as (_, mcp_server), Client(mcp_server) as client:
        tasks = demonstrated(server, rl_home.parent / "repo") * 4
        await call(client, "rl_write_mcp_tasks", server=server, tasks=tasks, eval_fraction=0.0)
        await call(client, "rl_select_environment", name=f"mcp:{server}")
        # git's seven read-only tools' schemas take more than 1024 tokens: refused with the length that fits
        if server == "git":
            await call(client, "rl_edit_config", field="max_token_length", value=1024)
            refused = (await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=300))["results"][0]
            assert refused["status"] == "failed" and "raise max_token_length to at least" in refused["error"]
        # each prompt within the profile's 4096 with room for two turns: git's with the one tool its task calls
        edits = {**TRAIN_EDITS, "demonstrations_per_group": 1, "eval_before_training": False}
        edits |= {"max_token_length": 4096, "total_steps": STEPS[server]}
        if server == "git":
            edits["tools"] = ["git_branch"]
        for field, value in edits.items():
            await call(client, "rl_edit_config", field=field, value=value)
        tested = await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=600)
        assert tested["results"][0]["status"] == "ok", tested["results"][0]["log_tail"]
        started = await call(client, "rl_start_training", wait=True)
        done = await wait_status(client, started["run_id"], {"completed", "failed", "stopped", "lost"}, 900)
        assert done["status"] == "completed", (done["error"], done["failure_log_tail"])
    files = RunFiles(Path(started["run_dir"]))
    lines = [json.loads(x) for x in files.metrics.read_text().splitlines()]
    steps = list(range(1, STEPS[server] + 1))
    assert [m["step"] for m in lines] == steps and all(m["agent_tool_calls_mean"] >= 0.5 for m in lines)
    verdicts = [json.loads(x) for x in files.verdicts.read_text().splitlines()]
    assert verdicts and all(v["reward"] == "check" and len(v["reasons"]) == len(v["scores"]) == 2 for v in verdicts)
    # the demonstrated rollout's tool result reached the model as context, never as trained tokens
    tok = AutoTokenizer.from_pretrained(str(ensure_model(TINY_CHAT)))
    group = json.loads(files.first_batch.read_text())["groups"][0]
    i = next(k for k, m in enumerate(group["messages"]) if any(x["role"] == "tool" for x in m))
    tokens, masks = group["tokens"][i], group["masks"][i]
    result = next(x["content"] for x in group["messages"][i] if x["role"] == "tool")
    trained = tok.decode([t for t, m in zip(tokens, masks) if m != -100])
    context = tok.decode([t for t, m in zip(tokens, masks) if m == -100])
    assert "<tool_call>" in trained and "<tool_response>" not in trained and result[:40] not in trained
    assert result[:40] in context
    assert leftover_servers(rl_home.parent) == []
