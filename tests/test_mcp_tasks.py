"""The `mcp` format's pure parts: the tool-servers file, the allow-list, the tasks file and its
split, and the five checks with partial credit, on transcripts as the agent loop writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tinker_atropos.mcp_tools.checks import score
from tinker_atropos.mcp_tools.servers_file import ServersFileError, read_servers, servers_path
from tinker_atropos.mcp_tools.tasks import TaskError, parse_task, read_tasks, split_tasks
from tinker_atropos.mcp_tools.tool_policy import ToolInfo, ToolPolicyError, allowed_tools


def transcript(call: tuple[str, dict] | None, result: str, answer: str) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "q"}]
    if call is not None:
        name, args = call
        entry = {"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [entry]},
            {"role": "tool", "tool_call_id": "c1", "name": name, "content": result},
        ]
    return [*messages, {"role": "assistant", "content": answer}]


def test_servers_file_reads_both_shapes_and_lists_a_bad_entry_with_its_error(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": "mcp-server-time", "env": {"TZ_KEY": "secret"}},
                    "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
                    "both": {"command": "a", "url": "http://b"},
                    "off": {"command": "x", "disabled": True},
                }
            }
        )
    )
    found = read_servers(path)
    assert set(found.servers) == {"time", "remote"} and "exactly one of `command`" in found.errors["both"]
    public = json.dumps([s.public() for s in found.servers.values()])
    assert "secret" not in public and "Bearer" not in public and "TZ_KEY" in public
    path.write_text(json.dumps({"mcp_servers": {"t": {"command": "x"}}}))  # Hermes' key
    assert set(read_servers(path).servers) == {"t"}
    path.write_text("{}")
    with pytest.raises(ServersFileError, match="no `mcpServers`"):
        read_servers(path)
    assert servers_path({"RL_MCP_TOOL_SERVERS": "/x/c.json"}, tmp_path) == Path("/x/c.json")
    assert servers_path({}, tmp_path) == tmp_path / "tool-servers.json"


def test_hermes_own_config_yaml_is_read_past_its_client_settings(tmp_path: Path) -> None:
    """Hermes' ~/.hermes/config.yaml as its docs show it: other sections, per-server timeouts,
    keepalive and sampling settings (read past), an SSE server (refused by name, not dropped)."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "model: {default: x}\n"
        "mcp_servers:\n"
        "  time:\n"
        "    command: mcp-server-time\n"
        "    args: []\n"
        "    timeout: 120\n"
        "    connect_timeout: 60\n"
        "    keepalive_interval: 10\n"
        "  remote:\n"
        "    url: https://example.com/mcp\n"
        "    headers: {Authorization: Bearer x}\n"
        "    sampling: {enabled: false}\n"
        "  searxng:\n"
        "    url: http://localhost:8000/sse\n"
        "    transport: sse\n"
        "  typo:\n"
        "    comand: x\n"
    )
    found = read_servers(path)
    assert set(found.servers) == {"time", "remote"}, found.errors
    assert "transport 'sse' is not served here" in found.errors["searxng"]
    assert "unknown field(s) ['comand']" in found.errors["typo"]
    path.write_text("mcp_servers: [\n")
    with pytest.raises(ServersFileError, match="not readable YAML"):
        read_servers(path)


def test_allow_list_defaults_to_read_only_and_never_enables_a_destructive_tool_implicitly() -> None:
    ro = {"readOnlyHint": True}
    tools = [
        ToolInfo("read", annotations=ro),
        ToolInfo("safe", annotations={"destructiveHint": False}),
        ToolInfo("wipe"),
    ]
    assert allowed_tools(tools, None, "s").names == ("read",)
    assert allowed_tools(tools, ["*"], "s").names == ("read", "safe")
    assert allowed_tools(tools, ["wipe"], "s").names == ("wipe",)
    unannotated = allowed_tools([ToolInfo("a"), ToolInfo("b")], None, "s")
    assert unannotated.names == () and "annotates none" in unannotated.note
    with pytest.raises(ToolPolicyError, match="does not have"):
        allowed_tools(tools, ["nope"], "s")


def test_tasks_parse_split_and_refuse_clearly(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [{"prompt": f"p{i}", "answer": str(i), "check": {"exact": True}} for i in range(8)]
    rows[0]["split"] = "eval"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    train, held = split_tasks(read_tasks(path), 0.25)
    assert len(held) == 3 and held[0].prompt == "p0" and len(train) == 5
    for bad, message in (
        ({"prompt": "p", "check": {"exact": True}}, "lacks"),
        ({"prompt": "p", "check": {"exact": "a", "contains": "b"}}, "exactly one"),
        ({"prompt": "p", "check": {"called": "t", "field": "x"}}, "for `final_answer_from` only"),
        ({"prompt": "p"}, "`check` is missing"),
        ({"prompt": "p", "check": {"contains": "a"}, "extra": 1}, "unknown field"),
    ):
        with pytest.raises(TaskError, match=message):
            parse_task(bad)
    path.write_text("not json\n")
    with pytest.raises(TaskError, match="line 1 is not JSON"):
        read_tasks(path)


@pytest.mark.parametrize(
    ("check", "call", "result", "answer", "reward"),
    [
        ({"exact": "21:00"}, None, "", " 21:00 ", 1.0),
        ({"exact": "21:00"}, None, "", "It is 21:00", 0.0),
        ({"contains": "21:00"}, ("convert_time", {}), '{"t": 1}', "It is 20:00", 0.3),  # a correct call
        ({"regex": r"\b21:00\b"}, None, "", "21:00 in Tokyo", 1.0),
        (
            {"called": "convert_time", "arguments": {"tz": "Asia/Tokyo"}},
            ("convert_time", {"tz": "asia/tokyo"}),
            "ok",
            "",
            1.0,
        ),
        ({"called": "convert_time", "arguments": {"tz": "Asia/Tokyo"}}, ("convert_time", {"tz": "UTC"}), "ok", "", 0.5),
        ({"called": "convert_time"}, ("convert_time", {}), '{"error": "boom"}', "", 0.5),  # it failed
        ({"final_answer_from": "now", "field": "day"}, ("now", {}), '{"day": "Friday"}', "It is Friday.", 1.0),
        ({"final_answer_from": "now", "field": "day"}, ("now", {}), '{"day": "Friday"}', "Monday", 0.3),
        ({"final_answer_from": "now"}, ("other", {}), "Friday", "Friday", 0.1),  # another tool: format credit only
        ({"contains": "x"}, ("t", {}), '{"error": "unknown"}', "y", 0.1),  # a call attempted, failed
    ],
)
def test_checks_score_with_partial_credit(check, call, result, answer, reward) -> None:
    task = parse_task({"prompt": "q", "check": check})
    assert score(task, transcript(call, result, answer)).reward == reward
