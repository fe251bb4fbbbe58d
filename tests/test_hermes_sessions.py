"""The supervised stage's `hermes_sessions` source on sessions the real Hermes recorded: hermes-agent
0.19.0 (the `hermes` runtime, `.runtimes/hermes`) run headless (`hermes -t terminal,file -z TASK`) against a scripted
OpenAI-compatible endpoint (tests/scripted_chat.py: deterministic sessions, two that succeed with
tool calls and secrets, two that fail), then `hermes sessions export --format jsonl`, read into
the stage of the bundled terminal_files environment (Hermes' own terminal and file tool schemas).
The redaction is held to Hermes' own functions, run in its venv on the same sessions and strings.

Skipped only when `.runtimes/hermes` is absent (`make hermes` makes it; `make test` depends on it).
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from loopback_http import loopback_http
from scripted_chat import call, scripted_handler

from rl_mcp.serving.clients import hermes_config
from rl_mcp.sft.answers import SftPreview, preview_answer
from tinker_atropos.agent.loop import PROMPT_MASK
from tinker_atropos.agent.tool_schemas import TOOL_SCHEMAS
from tinker_atropos.environments.terminal_files import TerminalFilesEnv
from tinker_atropos.hermes_harness.hermes_config import NO_SKILLS
from tinker_atropos.models import ensure_model
from tinker_atropos.models.paths import SMOLLM2
from tinker_atropos.sft.hermes_redact import Redactor
from tinker_atropos.sft.hermes_sessions import failure, read_sessions
from tinker_atropos.sft.settings import SftSettings
from tinker_atropos.sft.stage import close_servers
from tinker_atropos.sft.supervised_set import SupervisedSet, build_set

ROOT = Path(__file__).resolve().parents[1]
HERMES_PYTHON = ROOT / ".runtimes" / "hermes" / "bin" / "python"
HERMES = HERMES_PYTHON.with_name("hermes")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not HERMES_PYTHON.exists(), reason="Hermes not installed: `make hermes` installs it"),
]

WRITE = "Create the file notes/zulu77.txt containing exactly the line: zulu77"
COUNT = "How many lines does data.txt have? Write the number alone to count.txt."  # not a held-out item
FAIL_MID = "List the files here, then tell me about them."
FAIL_START = "Say hello."
KEY = "sk-proj-abcdefghij0123456789"  # in the model's own tool call: Hermes stores it raw
CONFIG_ENV = "DB_PASSWORD=hunter2-not-a-real-one\nLOG_LEVEL=info\n"  # in a tool result: Hermes' terminal keeps it
SCRIPT = {
    WRITE: [
        {
            "content": "I will write the file.",
            "tool_calls": [call("write_file", path="notes/zulu77.txt", content="zulu77\n")],
        },
        {"tool_calls": [call("terminal", command="cat notes/zulu77.txt config.env")]},
        {"content": "notes/zulu77.txt holds zulu77."},
    ],
    COUNT: [
        {"tool_calls": [call("terminal", command=f"OPENAI_API_KEY={KEY} wc -l < data.txt")]},
        {"tool_calls": [call("write_file", path="count.txt", content="3\n")]},
        {"content": "count.txt holds 3."},
    ],
    FAIL_MID: [
        {"tool_calls": [call("terminal", command="ls")]},
        {"status": 400, "error": "scripted: the provider refused this request"},
    ],
    FAIL_START: [{"status": 400, "error": "scripted: the provider refused this request"}],
}


def hermes(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "OPENAI_", "PYTHON"))}
    return subprocess.run(
        [str(HERMES), *args],
        cwd=cwd,
        env={**env, "HERMES_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four sessions of the real Hermes (run at once, each in its own folder), exported."""
    root = tmp_path_factory.mktemp("hermes-sessions")
    home = root / "home"
    home.mkdir()
    with loopback_http(scripted_handler(SCRIPT)) as url:
        config = hermes_config("scripted", f"{url}/v1")
        config["model"]["context_length"] = 65536  # Hermes 0.19 refuses a model it cannot size under 64K
        (home / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
        (home / NO_SKILLS).touch()

        def run(k: int, task: str) -> subprocess.CompletedProcess[str]:
            cwd = root / f"work{k}"
            cwd.mkdir()
            (cwd / "config.env").write_text(CONFIG_ENV)
            (cwd / "data.txt").write_text("a\nb\nc\n")
            return hermes(home, cwd, "-t", "terminal,file", "-z", task)

        with ThreadPoolExecutor(len(SCRIPT)) as pool:
            done = list(pool.map(run, range(len(SCRIPT)), SCRIPT))
    for task, proc in zip(SCRIPT, done, strict=True):
        assert proc.returncode == 0, (task, proc.stdout[-2000:], proc.stderr[-2000:])
    path = root / "sessions.jsonl"
    proc = hermes(home, root, "sessions", "export", str(path), "--format", "jsonl")
    assert proc.returncode == 0 and path.is_file(), proc.stdout + proc.stderr
    return path


@pytest.fixture(scope="module")
def hermes_redacted(exported: Path) -> dict[str, Any]:
    """Hermes' own redaction in its venv: `redact_session_data` (what `sessions export --redact` runs)
    of each exported session, `redact_sensitive_text(force=True)` of each CORPUS string."""
    script = (
        "import json, sys\n"
        "from agent.redact import redact_sensitive_text\n"
        "from hermes_cli.session_export_md import redact_session_data\n"
        "given = json.load(sys.stdin)\n"
        "print(json.dumps({'sessions': [redact_session_data(s) for s in given['sessions']],\n"
        "    'corpus': [redact_sensitive_text(t, force=True) for t in given['corpus']]}))"
    )
    given = {"sessions": [json.loads(line) for line in exported.read_text().splitlines()], "corpus": CORPUS}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "PYTHON"))}
    proc = subprocess.run(
        [str(HERMES_PYTHON), "-c", script], input=json.dumps(given), capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def by_task(read: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Sessions by their task (the first user message)."""
    return {next(m["content"] for m in s["messages"] if m["role"] == "user"): s for s in read}


def sessions(path: Path) -> dict[str, dict[str, Any]]:
    return by_task([json.loads(line) for line in path.read_text().splitlines()])


async def preview(path: Path, **settings: Any) -> tuple[SftPreview, SupervisedSet]:
    """The stage's set built from `path` as its process builds it, answered as rl_preview_sft answers."""
    config, servers = TerminalFilesEnv.config_init()
    config.tokenizer_name = servers[0].tokenizer_name = str(ensure_model(SMOLLM2))
    env = TerminalFilesEnv(config, servers)
    await env.setup()
    try:
        sft = SftSettings(sources=["hermes_sessions"], sessions_file=str(path), **settings)
        supervised = await build_set(env, sft)
        summary = supervised.summary(env.tokenizer)
    finally:
        await close_servers(env)
    return preview_answer("terminal_files", path.parent, summary), supervised


def test_what_hermes_records_is_what_the_reader_reads(exported: Path) -> None:
    """The format facts the reader relies on, as this Hermes writes them."""
    read = sessions(exported)
    assert set(read) == set(SCRIPT)
    write = read[WRITE]
    assert write["end_reason"] == "agent_close" and write["system_prompt"]
    assert [m["role"] for m in write["messages"]] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert json.loads(write["messages"][1]["tool_calls"][0]["function"]["arguments"])["path"] == "notes/zulu77.txt"
    assert "DB_PASSWORD=hunter2-not-a-real-one" in write["messages"][4]["content"]  # raw without --redact
    assert KEY in json.dumps(read[COUNT]["messages"])
    # Hermes stores no failed flag: a failed turn leaves the messages without the model's answer
    assert [m["role"] for m in read[FAIL_START]["messages"]] == ["user"]
    assert [m["role"] for m in read[FAIL_MID]["messages"]] == ["user", "assistant", "tool"]
    assert read[FAIL_MID]["end_reason"] == read[FAIL_START]["end_reason"] == "agent_close"


@pytest.mark.anyio
async def test_the_preview_counts_what_the_stage_would_learn_from(exported: Path) -> None:
    answer, supervised = await preview(exported)
    seen = answer.hermes_sessions
    assert seen is not None
    assert (seen.sessions, seen.kept, seen.failed_left_out, seen.failed_included, seen.refused) == (4, 2, 2, 0, 0)
    assert seen.redacted_texts == 2 and not seen.include_failed
    assert answer.counts == {"hermes_sessions": {"kept": 2, "refused": 2}}
    why = {r.reason for r in answer.refused}
    assert any(r.startswith("failed in Hermes, left out: the model never answered") for r in why), why
    assert any("ends on a tool call without the model's final answer" in r for r in why), why

    example = answer.example
    assert (
        example is not None
        and example.source == "hermes_sessions"
        and example.origin.startswith("session ")
        and "(line " in example.origin
    )
    trained = "".join(s.text for s in example.spans if s.trained)
    untrained = "".join(s.text for s in example.spans if not s.trained)
    assert "<tool_call>" in trained and ("write_file" in trained or "wc -l" in trained)
    assert WRITE not in trained and COUNT not in trained  # the task weighs nothing
    assert "bytes_written" not in trained and "exit_code" not in trained  # nor do Hermes' tool results
    assert "exit_code" in untrained and "hunter2" not in untrained + trained  # recorded, redacted
    assert answer.tokens > answer.trained_tokens > 0
    first = supervised.examples[0]  # a mask holds the token where it is trained: the model's own, as sampled
    assert all(m in (t, PROMPT_MASK) for t, m in zip(first.tokens, first.masks, strict=True))


@pytest.mark.anyio
async def test_a_failed_session_is_learned_up_to_its_failure_when_asked(exported: Path) -> None:
    answer, _ = await preview(exported, include_failed=True)
    seen = answer.hermes_sessions
    assert seen is not None
    assert (seen.kept, seen.failed_left_out, seen.failed_included, seen.refused) == (3, 0, 1, 1)
    assert answer.counts == {"hermes_sessions": {"kept": 3, "refused": 1}}
    why = [r.reason for r in answer.refused]
    assert any("no assistant turn" in r and "it failed in Hermes: the model never answered" in r for r in why), why


def test_the_redaction_is_hermes_own_and_counted(exported: Path, hermes_redacted: dict[str, Any]) -> None:
    """Each session redacted here equals Hermes' `--redact` of it; each text it changed counted."""
    raw, theirs = sessions(exported), by_task(hermes_redacted["sessions"])
    redactor, changed = Redactor(), 0
    for task, session in raw.items():
        ours = redactor.value(session["messages"])
        assert ours == theirs[task]["messages"], task
        changed += sum(a != b for a, b in zip(strings(session["messages"]), strings(ours), strict=True))
    assert redactor.texts == changed == 2  # the key in a call's arguments, the password in a tool result
    assert KEY not in json.dumps(theirs) and "hunter2" not in json.dumps(theirs)


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    return []


# One secret of each rule (and text with none), as users' sessions hold them.
CORPUS = [
    "export OPENAI_API_KEY=sk-proj-abcdefghij0123456789",
    "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 in a sentence",
    "AKIAABCDEFGHIJKLMNOP was the access key",
    "hf_abcdefghijklmnop and short sk-abcdefghijk",
    "MY_SERVICE_TOKEN=abc123randomvalue",
    "PASSWORD = 'quoted-secret-value'",
    "spring.datasource.password=hunter2",
    "password=hunter2\nuser=bob",
    "  export api_key=xyz789",
    '{"apiKey": "abcdef123456", "name": "x"}',
    '{"password": "os.getenv(\'PW\')"}',
    "db:\n  password: s3cr3t-value-here\n  host: h",
    "note: secret meeting at noon",
    "Authorization: Bearer abcdef0123456789abcdef",
    'curl -H "Authorization: Basic dXNlcjpwYXNz" http://x',
    "x-api-key: local-opaque-key-123",
    "bot123456789:ABCdefGHIjklMNOpqrSTUvwxYZ0123456789ab",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAK\n-----END RSA PRIVATE KEY-----",
    "postgresql://admin:hunter2@db.example.com:5432/app",
    "git remote set-url origin https://ghtoken12345678@github.com/o/r.git",
    "https://user:pass@example.com/x?token=abc",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
    "client_id=abc&client_secret=xyz&grant_type=code",
    "call me at +14155552671 tomorrow",
    "KEY=os.getenv('OPENAI_API_KEY')",
    "plain text with = and : and nothing secret",
]


def test_the_rules_match_hermes_redact_sensitive_text(hermes_redacted: dict[str, Any]) -> None:
    """Hermes' own function and the reimplementation, string by string."""
    for text, expected in zip(CORPUS, hermes_redacted["corpus"], strict=True):
        redactor = Redactor()
        assert redactor.text(text) == expected, text
        assert redactor.texts == (expected != text), text
    assert sum(t != e for t, e in zip(CORPUS, hermes_redacted["corpus"], strict=True)) >= 20  # the rules exercised


CUT_AND_CONTINUED = [
    {"role": "user", "content": "What does note.txt say?"},
    {"role": "assistant", "content": "It says", "finish_reason": "length"},
    {"role": "user", "content": "[System: Your previous response was truncated by the output length limit. Continue"},
]
ITERATION_LIMIT = [
    {"role": "user", "content": "Run ls."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "function": {"name": "terminal", "arguments": '{"command": "ls"}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"output": "a", "exit_code": 0, "error": null}'},
    {"role": "user", "content": "You've reached the maximum number of tool-calling iterations allowed. Please"},
    {"role": "assistant", "content": "I listed the files."},
]


def test_a_failed_session_included_keeps_only_what_the_model_wrote_before_it_failed(tmp_path: Path) -> None:
    path = tmp_path / "sessions.jsonl"
    path.write_text(
        "".join(json.dumps({"id": k, "messages": m}) + "\n" for k, m in enumerate([CUT_AND_CONTINUED, ITERATION_LIMIT]))
    )
    tools = list(TOOL_SCHEMAS.values())
    assert [n.reason.split(" ")[0] for n in read_sessions(path, tools).failed] == ["a", "it"]
    read = read_sessions(path, tools, include_failed=True)
    assert [(n.session, "no assistant turn" in n.reason) for n in read.refused] == [
        ("0", True)
    ]  # the cut reply dropped
    (kept,) = read.kept
    assert kept.failed and "iterations" in kept.failed
    assert [t.calls[0].name for t in kept.conversation.turns] == ["terminal"]  # Hermes' request and its answer dropped


@pytest.mark.parametrize(
    ("session", "why"),
    [
        ({"end_reason": "compression", "messages": []}, "went on in another session"),
        (
            {
                "messages": [
                    {"role": "user", "content": "t"},
                    {"role": "assistant", "content": "", "tool_calls": [{}]},
                    {"role": "tool", "content": "r"},
                    {
                        "role": "user",
                        "content": "You've reached the maximum number of tool-calling iterations allowed. x",
                    },
                    {"role": "assistant", "content": "summary"},
                ]
            },
            "limit of tool-calling iterations",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "t"},
                    {"role": "assistant", "content": "I apologize, but I encountered repeated errors: boom"},
                ]
            },
            "Hermes' error text",
        ),
        (  # as SmolLM2-135M's reply under `model.max_tokens: 64` left it, served by the product's server
            {"messages": [*CUT_AND_CONTINUED, {"role": "assistant", "content": "rest.", "finish_reason": "stop"}]},
            "cut at the output limit and Hermes asked the model to continue it",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "t"},
                    {"role": "assistant", "content": "cut", "finish_reason": "length"},
                ]
            },
            "cut at the output limit",
        ),
        ({"messages": [{"role": "user", "content": "t"}, {"role": "assistant", "content": "done"}]}, None),
    ],
)
def test_the_ways_a_hermes_session_fails(session: dict[str, Any], why: str | None) -> None:
    """Hermes' other failure marks (its own texts, the compression split), written as Hermes writes them."""
    found = failure(session, session["messages"])
    assert (found is None) if why is None else (found is not None and why in found), found
