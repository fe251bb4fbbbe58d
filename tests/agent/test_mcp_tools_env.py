"""The `mcp` environment's rollouts against real MCP servers over stdio (mcp-server-time and
mcp-server-git from PyPI, in `.venv-mcp-servers`; a misbehaving one of ours): every call a real
`tools/call`, exact tokens with only the model's turns trained, the check reward with partial
credit, the judge against a local endpoint, and the failures, each a clear error with no server
process left behind."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import psutil
import pytest
from agent_helpers import close_env, make_env
from loopback_http import loopback_http
from mcp_tool_servers import SERVERS_VENV, git_repo

from tinker_atropos.environments.mcp_tools_env import McpToolsEnv
from tinker_atropos.mcp_tools.judge import JudgeError
from tinker_atropos.mcp_tools.sessions import ServerUnavailable
from tinker_atropos.mcp_tools.tool_policy import ToolPolicyError

ROOT = Path(__file__).resolve().parents[2]
FAULTY = ROOT / "tests" / "fixtures" / "mcp_servers" / "faulty_server.py"
pytestmark = pytest.mark.anyio


def _call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def server_processes() -> list[psutil.Process]:
    """Live MCP server processes started under this test process."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            line = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if ("mcp-server-" in line or "faulty_server" in line) and "--http" not in line:  # not the module's HTTP one
            found.append(p)
    return [p for p in found if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    """The faulty server over Streamable HTTP, its URL once it listens."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(FAULTY), "--http", str(port)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def servers_file(tmp_path_factory, http_server) -> Path:
    assert (SERVERS_VENV / "mcp-server-time").exists(), "run `make mcp-servers`"
    root = tmp_path_factory.mktemp("mcp")
    repo = git_repo(root, "Add the notes file")
    path = root / "tool-servers.json"
    servers = {
        "time": {"command": str(SERVERS_VENV / "mcp-server-time"), "args": ["--local-timezone", "UTC"]},
        "git": {"command": str(SERVERS_VENV / "mcp-server-git"), "args": ["--repository", str(repo)]},
        "faulty": {"command": sys.executable, "args": [str(FAULTY)], "env": {"FAULTY_SETTING": "1"}},
        "broken": {"command": sys.executable, "args": [str(FAULTY), "--crash-at-start"]},
        "missing": {"command": str(root / "no-such-server")},
        "remote": {"url": http_server, "headers": {"X-Token": "not-echoed"}},
    }
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def tasks_file(tmp_path: Path, *tasks: dict) -> str:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return str(path)


def env_for(url, tiny_path, servers_file: Path, server: str, tasks: str, **overrides) -> McpToolsEnv:
    settings = {"group_size": 2, "max_token_length": 8192, "eval_fraction": 0.0, **overrides}
    return make_env(
        McpToolsEnv,
        url,
        tiny_path,
        mcp_server=server,
        tool_servers_file=str(servers_file),
        tasks_file=tasks,
        **settings,
    )


async def group_of(env: McpToolsEnv):
    try:
        await env.setup()
        return (await env.collect_trajectories(env.train_items[0]))[0]
    finally:
        await close_env(env)


TOKYO = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}


async def test_time_server_calls_are_real_and_only_the_model_turns_are_trained(
    scripted, tiny_path, servers_file, tmp_path
) -> None:
    url, sampler = scripted
    task = {"prompt": "It is 12:00 in UTC. What time is it in Tokyo?", "answer": "21:00", "check": {"contains": True}}
    sampler.script = [_call("convert_time", **TOKYO), "It is 21:00 in Tokyo."]
    env = env_for(url, tiny_path, servers_file, "time", tasks_file(tmp_path, task))
    group = await group_of(env)
    assert group["scores"] == [1.0, 1.0]
    assert group["overrides"][0] == {
        "correct": True,
        "turns": 2,
        "tool_calls": 1,
        "tool_errors": 0,
        "reason": "check: final answer passes contains",
    }
    result = json.loads(group["messages"][0][-2]["content"])  # the server's own answer
    assert result["target"]["timezone"] == "Asia/Tokyo" and "T21:00" in result["target"]["datetime"]
    tokens, masks = group["tokens"][0], group["masks"][0]
    trained = env.tokenizer.decode([t for t, m in zip(tokens, masks) if m != -100])
    context = env.tokenizer.decode([t for t, m in zip(tokens, masks) if m == -100])
    assert '"name": "convert_time"' in trained and "It is 21:00 in Tokyo." in trained
    assert "Asia/Tokyo" in context and "<tool_response>" in context and "<tool_response>" not in trained
    assert len(group["inference_logprobs"][0]) == len(tokens)
    assert server_processes() == []

    # partial credit: the right call, a wrong final answer; and no call at all
    sampler.script = [_call("convert_time", **TOKYO), "It is noon."]
    group = await group_of(env_for(url, tiny_path, servers_file, "time", tasks_file(tmp_path, task)))
    assert group["scores"] == [0.3, 0.3]
    assert group["overrides"][0]["reason"] == "check: a correct tool call (convert_time), the check failed"
    sampler.script = ["I think it is 9 o'clock."]
    group = await group_of(env_for(url, tiny_path, servers_file, "time", tasks_file(tmp_path, task)))
    assert group["scores"] == [0.0, 0.0] and group["overrides"][0]["tool_calls"] == 0


async def test_git_server_on_a_repository_the_test_made(scripted, tiny_path, servers_file, tmp_path) -> None:
    url, sampler = scripted
    tasks = tasks_file(
        tmp_path,
        {
            "prompt": "Which branch is checked out?",
            "check": {"called": "git_branch", "arguments": {"branch_type": "local"}},
        },
    )
    repo = str(servers_file.parent / "repo")
    sampler.script = [_call("git_branch", repo_path=repo, branch_type="local"), "main"]
    env = env_for(url, tiny_path, servers_file, "git", tasks)
    group = await group_of(env)
    assert group["scores"] == [1.0, 1.0] and "main" in group["messages"][0][-2]["content"]
    # the default allow-list: git's read-only tools; git_reset (destructive) and the writers are not offered
    assert "git_reset" not in env.allowed.names and "git_commit" not in env.allowed.names
    assert {"git_log", "git_status", "git_branch"} <= set(env.allowed.names)
    sampler.script = [_call("git_log", repo_path=repo, max_count=1), "Add the notes file"]
    tasks = tasks_file(tmp_path, {"prompt": "What was the last commit?", "check": {"final_answer_from": "git_log"}})
    group = await group_of(env_for(url, tiny_path, servers_file, "git", tasks))
    assert group["scores"] == [0.3, 0.3]  # the whole log text is not stated: the call earns partial credit
    sampler.script = [_call("git_reset", repo_path=repo), "Done."]
    group = await group_of(env_for(url, tiny_path, servers_file, "git", tasks))
    assert (
        group["overrides"][0]["tool_errors"] == 1 and "Unknown tool: 'git_reset'" in group["messages"][0][-2]["content"]
    )
    assert server_processes() == []


async def test_a_destructive_tool_asked_for_implicitly_is_refused(scripted, tiny_path, servers_file, tmp_path) -> None:
    url, _ = scripted
    tasks = tasks_file(tmp_path, {"prompt": "Clean up.", "check": {"called": "wipe"}})
    for tools in (None, ["*"]):
        env = env_for(url, tiny_path, servers_file, "faulty", tasks, tools=tools)
        with pytest.raises(ToolPolicyError, match="'wipe'.*never enabled implicitly.*`tools`"):
            await env.setup()
        await close_env(env)
    env = env_for(url, tiny_path, servers_file, "faulty", tasks, tools=["echo", "wipe"])
    await env.setup()  # named: allowed
    await close_env(env)
    assert server_processes() == []


async def test_failures_are_clear_errors_and_leave_no_process(
    scripted, tiny_path, servers_file, tmp_path, monkeypatch
) -> None:
    url, sampler = scripted
    tasks = tasks_file(tmp_path, {"prompt": "Echo hi.", "check": {"contains": "hi"}})
    env = env_for(url, tiny_path, servers_file, "missing", tasks)
    with pytest.raises(ServerUnavailable, match="not found.*tool-servers file"):
        await env.setup()
    env = env_for(url, tiny_path, servers_file, "broken", tasks)
    with pytest.raises(ServerUnavailable, match="cannot open its database"):  # its stderr tail
        await env.setup()

    # crash mid-rollout: that call and the next are tool errors; the rollout is scored
    sampler.script = [_call("crash"), _call("echo", text="hi"), "hi"]
    group = await group_of(env_for(url, tiny_path, servers_file, "faulty", tasks))
    first, second = group["messages"][0][3]["content"], group["messages"][0][5]["content"]
    assert json.loads(first)["error"] and json.loads(second)["error"], (first, second)
    assert group["overrides"][0]["tool_errors"] == 2
    # a hanging call times out; isError comes back as a tool error; a long result is cut
    sampler.script = [_call("hang"), _call("fail"), _call("big"), "hi"]
    env = env_for(
        url, tiny_path, servers_file, "faulty", tasks, tool_timeout_s=2, max_tool_result_chars=500, max_agent_turns=4
    )
    group = await group_of(env)
    hang, fail, big = (group["messages"][0][i]["content"] for i in (3, 5, 7))
    assert "no answer within 2 s" in hang and "Error executing tool fail" in fail  # isError, as the server words it
    assert len(big) < 700 and "result cut at 500" in big
    # the server sees only its configured env and the minimum: no product key
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-servers")
    sampler.script = [_call("env_keys"), "hi"]
    group = await group_of(env_for(url, tiny_path, servers_file, "faulty", tasks))
    names = group["messages"][0][3]["content"].split(",")
    assert "FAULTY_SETTING" in names and "OPENAI_API_KEY" not in names and "PATH" in names
    assert server_processes() == []


class _Judge(BaseHTTPRequestHandler):
    answer = ""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": self.answer}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def judge_url() -> Iterator[str]:
    with loopback_http(_Judge) as url:
        yield f"{url}/v1"


async def test_judge_scores_a_group_relative_and_fails_by_name(
    scripted, tiny_path, servers_file, tmp_path, judge_url
) -> None:
    url, sampler = scripted
    tasks = tasks_file(tmp_path, {"prompt": "Echo hi.", "check": {"contains": "hi"}})
    sampler.script = [_call("echo", text="hi"), "hi"]
    _Judge.answer = (
        'Verdict: {"scores": [{"id": 1, "score": 0.9, "reason": "used echo"}, {"id": 2, "score": 0.4, "reason": "ok"}]}'
    )
    env = env_for(
        url, tiny_path, servers_file, "faulty", tasks, reward="judge", judge_base_url=judge_url, judge_model="j"
    )
    group = await group_of(env)
    assert group["scores"] == [0.9, 0.4] and [o["reason"] for o in group["overrides"]] == [
        "judge: used echo",
        "judge: ok",
    ]
    _Judge.answer = "I cannot decide."
    env = env_for(url, tiny_path, servers_file, "faulty", tasks, reward="judge", judge_base_url=judge_url)
    with pytest.raises(JudgeError, match="judge_unparseable.*I cannot decide"):
        await group_of(env)
    env = env_for(url, tiny_path, servers_file, "faulty", tasks, reward="judge", judge_base_url="http://127.0.0.1:9/v1")
    with pytest.raises(JudgeError, match="judge_unreachable.*127.0.0.1:9"):
        await group_of(env)
    env = env_for(
        url, tiny_path, servers_file, "faulty", tasks, reward="judge", judge_api_key_var="RL_MCP_TEST_JUDGE_KEY"
    )
    with pytest.raises(JudgeError, match="judge_key_missing.*RL_MCP_TEST_JUDGE_KEY"):
        await group_of(env)
    assert "RL_MCP_TEST_JUDGE_KEY" not in os.environ
    assert server_processes() == []


async def test_a_stdio_server_in_bubblewrap_has_no_network(
    scripted, tiny_path, servers_file, tmp_path, judge_url
) -> None:
    from tinker_atropos.agent.sandboxes.bwrap import probe

    if (why := probe()) is not None:
        pytest.skip(f"bubblewrap does not run here: {why}")
    url, sampler = scripted
    tasks = tasks_file(tmp_path, {"prompt": "What time is it in Tokyo?", "check": {"called": "convert_time"}})
    sampler.script = [_call("convert_time", **TOKYO), "21:00"]
    group = await group_of(env_for(url, tiny_path, servers_file, "time", tasks, sandbox="bwrap"))
    assert group["scores"] == [1.0, 1.0] and "Asia/Tokyo" in group["messages"][0][3]["content"]
    port = int(judge_url.rsplit(":", 1)[1].split("/")[0])  # a port that listens on the host
    sampler.script = [_call("connect", port=port), "hi"]
    outside = await group_of(env_for(url, tiny_path, servers_file, "faulty", tasks_file(tmp_path, EAGER)))
    inside = await group_of(
        env_for(url, tiny_path, servers_file, "faulty", tasks_file(tmp_path, EAGER), sandbox="bwrap")
    )
    assert outside["messages"][0][3]["content"] == "connected"
    assert inside["messages"][0][3]["content"].startswith("unreachable")
    assert server_processes() == []


EAGER = {"prompt": "x", "check": {"contains": "x"}}


KILLED_MID_CALL = """
import sys, anyio
from pathlib import Path
from tinker_atropos.mcp_tools.servers_file import find_server
from tinker_atropos.mcp_tools.sessions import call_tool, open_session

async def main():
    spec = find_server(Path(sys.argv[1]), "faulty")
    async with open_session(spec, start_timeout_s=20) as session:
        print("calling", flush=True)
        await call_tool(session, "hang", {}, timeout_s=600, max_chars=100)

anyio.run(main)
"""


def test_a_server_dies_with_a_rollout_process_killed_outright(servers_file, tmp_path) -> None:
    """SIGKILL leaves no cleanup to run: the server is started to die with its parent."""
    import signal

    script = tmp_path / "killed.py"
    script.write_text(KILLED_MID_CALL)
    # its TMPDIR the test's: SIGKILL leaves the server's stderr file (mkstemp, unlinked on exit) behind
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(servers_file)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "calling"
    time.sleep(1.0)  # the call is in flight: the server sleeps in `hang`
    servers = [p for p in psutil.Process(proc.pid).children(recursive=True) if "faulty_server" in " ".join(p.cmdline())]
    assert servers, "the server should be running"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    gone, alive = psutil.wait_procs(servers, timeout=10)
    assert alive == [], [p.cmdline() for p in alive]


async def test_a_called_task_with_its_arguments_is_demonstrated_through_the_real_server(
    scripted, tiny_path, servers_file, tmp_path
) -> None:
    url, sampler = scripted
    task = {
        "prompt": "UTC 12:00 is what in Tokyo?",
        "answer": "21:00",
        "check": {"called": "convert_time", "arguments": TOKYO},
    }
    sampler.script = ["No idea."]
    env = env_for(url, tiny_path, servers_file, "time", tasks_file(tmp_path, task), demonstrations_per_group=1)
    group = await group_of(env)
    assert group["scores"] == [1.0, 0.0] and group["inference_logprobs"][0] == []
    assert "T21:00" in group["messages"][0][3]["content"] and group["messages"][0][-1]["content"] == "21:00"
    assert server_processes() == []


async def test_a_streamable_http_server_is_called_like_a_stdio_one(scripted, tiny_path, servers_file, tmp_path) -> None:
    url, sampler = scripted
    sampler.script = [_call("echo", text="over http"), "over http"]
    tasks = tasks_file(tmp_path, {"prompt": "Echo 'over http'.", "check": {"final_answer_from": "echo"}})
    group = await group_of(env_for(url, tiny_path, servers_file, "remote", tasks))
    assert group["scores"] == [1.0, 1.0] and group["messages"][0][3]["content"] == "over http"


async def test_a_fresh_process_per_rollout_unless_the_server_is_stateless(
    scripted, tiny_path, servers_file, tmp_path
) -> None:
    url, sampler = scripted
    sampler.script = [_call("pid"), "ok"]
    tasks = tasks_file(tmp_path, EAGER)
    group = await group_of(env_for(url, tiny_path, servers_file, "faulty", tasks, group_size=3))
    assert len({m[3]["content"] for m in group["messages"]}) == 3
    env = env_for(url, tiny_path, servers_file, "faulty", tasks, group_size=3, stateless=True)
    try:
        group = await group_of(env)
        assert len({m[3]["content"] for m in group["messages"]}) == 1
        assert len(server_processes()) == 1  # kept for the next group
    finally:
        await env.close()
    assert server_processes() == []
