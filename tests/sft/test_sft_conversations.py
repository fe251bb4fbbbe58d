"""The supervised stage's `file` source (sft/conversations.py): a JSONL of conversations in the
OpenAI `messages` or the ShareGPT `conversations` form, checked against the environment's tools.

(Named test_sft_conversations.py: tests/test_conversations.py already holds the basename, and the
test folders are not packages.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tinker_atropos.sft.conversations import (
    AssistantTurn,
    Conversation,
    ConversationFileError,
    Refusal,
    ToolCallRecord,
    read_conversations,
)

TERMINAL = {
    "type": "function",
    "function": {
        "name": "terminal",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
            "required": ["command"],
        },
    },
}
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
TOOLS = [TERMINAL, READ_FILE]
SYSTEM = "You are a careful shell user."
TASK = "How many files are in /data?"
RESULT = '{"output": "a.txt\\nb.txt", "exit_code": 0}'
ANSWER = "<think>\nTwo lines of output.\n</think>\nThere are 2 files."

# One dialogue, written by hand in each form as a user would.
OPENAI = {
    "messages": [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": [{"type": "text", "text": "How many files "}, {"type": "text", "text": "are in /data?"}],
        },
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "terminal", "arguments": '{"command": "ls /data"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": RESULT},
        {"role": "assistant", "content": ANSWER},
    ],
    "tools": [TERMINAL],
}
SHAREGPT = {
    "conversations": [
        {"from": "system", "value": SYSTEM},
        {"from": "human", "value": TASK},
        {
            "from": "gpt",
            "value": "Let me look.\n"
            '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls /data"}}\n</tool_call>',
        },
        {
            "from": "tool",
            "value": '<tool_response>\n{"tool_call_id": "call_1", "name": "terminal", "content": '
            + RESULT
            + "}\n</tool_response>",
        },
        {"from": "gpt", "value": ANSWER},
    ],
    "tools": json.dumps([TERMINAL]),
    "source": "hermes-agent",
}
EXPECTED_TURNS = [
    AssistantTurn(
        text='Let me look.\n<tool_call>\n{"name": "terminal", "arguments": {"command": "ls /data"}}\n</tool_call>',
        calls=[ToolCallRecord("terminal", {"command": "ls /data"})],
        results=[RESULT],
    ),
    AssistantTurn(text=ANSWER, calls=[], results=[]),
]


def write(tmp_path: Path, *records: Any) -> Path:
    path = tmp_path / "conversations.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def refusals(tmp_path: Path, *records: Any) -> list[Refusal]:
    found = read_conversations(write(tmp_path, *records), TOOLS)
    return found.refused


def sharegpt(*turns: tuple[str, str]) -> dict[str, Any]:
    return {"conversations": [{"from": f, "value": v} for f, v in turns]}


def call_text(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def test_both_forms_give_the_same_conversation(tmp_path: Path) -> None:
    found = read_conversations(write(tmp_path, OPENAI, SHAREGPT), TOOLS)
    assert found.refused == [] and found.summary() == "kept 2, refused 0"
    prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    assert found.kept == [
        Conversation(line=1, prompt=prompt, turns=EXPECTED_TURNS),
        Conversation(line=2, prompt=prompt, turns=EXPECTED_TURNS),
    ]


def test_several_calls_and_several_tool_responses_in_one_tool_value(tmp_path: Path) -> None:
    calls = call_text("terminal", {"command": "ls"}) + "\n" + call_text("read_file", {"path": "a.txt"})
    responses = "<tool_response>\nplain output\n</tool_response>\n" + (
        '<tool_response>\n{"tool_call_id": "c2", "name": "read_file", "content": {"text": "hi"}}\n</tool_response>'
    )
    found = read_conversations(
        write(tmp_path, sharegpt(("human", TASK), ("gpt", "<think>\n</think>\n" + calls), ("tool", responses))),
        TOOLS,
    )
    (turn,) = found.require_kept()[0].turns
    assert turn.text == "<think>\n</think>\n" + calls
    assert turn.calls == [ToolCallRecord("terminal", {"command": "ls"}), ToolCallRecord("read_file", {"path": "a.txt"})]
    assert turn.results == ["plain output", '{"text": "hi"}']


def test_openai_calls_written_as_text_in_content_and_null_content(tmp_path: Path) -> None:
    record = {
        "messages": [
            {"role": "user", "content": TASK},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"type": "function", "function": {"name": "terminal", "arguments": {"command": "ls"}}}],
            },
            {"role": "tool", "content": "x"},
            {"role": "assistant", "content": call_text("terminal", {"command": "pwd"})},
            {"role": "tool", "content": "/"},
            {"role": "assistant", "content": "done"},
        ]
    }
    (conversation,) = read_conversations(write(tmp_path, record), TOOLS).kept
    assert [t.text for t in conversation.turns] == [
        call_text("terminal", {"command": "ls"}),
        call_text("terminal", {"command": "pwd"}),
        "done",
    ]
    assert [t.results for t in conversation.turns] == [["x"], ["/"], []]


def test_the_environments_tools_win_over_the_files(tmp_path: Path) -> None:
    # The file offers only `browser`; the environment offers terminal and read_file.
    uses_terminal = {**SHAREGPT, "tools": json.dumps([{"type": "function", "function": {"name": "browser"}}])}
    uses_browser = sharegpt(("human", TASK), ("gpt", call_text("browser", {"url": "x"})), ("tool", "page"))
    uses_browser["tools"] = uses_terminal["tools"]
    found = read_conversations(write(tmp_path, uses_terminal, uses_browser), TOOLS)
    assert [c.line for c in found.kept] == [1]
    assert found.refused == [
        Refusal(2, "calls tool 'browser' the environment does not offer (offers: terminal, read_file)")
    ]


def test_a_system_message_holding_the_files_tool_prompt_is_dropped(tmp_path: Path) -> None:
    hermes_system = 'You are a function calling AI model. <tools>\n[{"name": "browser"}]\n</tools> Use them.'
    record = sharegpt(("system", hermes_system), ("human", TASK), ("gpt", "4"))
    (conversation,) = read_conversations(write(tmp_path, record), TOOLS).kept
    assert conversation.prompt == [{"role": "user", "content": TASK}]


def test_arguments_the_schema_refuses(tmp_path: Path) -> None:
    missing = sharegpt(("human", TASK), ("gpt", call_text("terminal", {"cmd": "ls"})), ("tool", "x"))
    wrong_type = sharegpt(
        ("human", TASK), ("gpt", call_text("terminal", {"command": "ls", "timeout": "5"})), ("tool", "x")
    )
    assert refusals(tmp_path, missing, wrong_type) == [
        Refusal(1, "tool 'terminal': its schema refuses the arguments (arguments: 'command' is a required property)"),
        Refusal(2, "tool 'terminal': its schema refuses the arguments (timeout: '5' is not of type 'integer')"),
    ]


def test_every_malformed_line_is_refused_with_its_number_and_the_others_kept(tmp_path: Path) -> None:
    ok = sharegpt(("human", TASK), ("gpt", "4"))
    lines: list[Any] = [
        ok,
        '{"messages": [',
        "[1, 2]",
        {"prompt": TASK},
        sharegpt(("human", TASK), ("narrator", "once upon a time"), ("gpt", "4")),
        {"messages": [{"role": "user", "content": TASK}, {"role": "function", "content": "x"}]},
        sharegpt(("human", TASK), ("gpt", "")),
        sharegpt(
            ("human", TASK),
            ("gpt", call_text("terminal", {"command": "ls"})),
            ("tool", "<tool_response>a</tool_response><tool_response>b</tool_response>"),
        ),
        sharegpt(("human", TASK), ("gpt", call_text("terminal", {"command": "ls"}))),
        sharegpt(("system", SYSTEM), ("human", TASK)),
        sharegpt(("human", TASK), ("gpt", "4"), ("human", "and /tmp?"), ("gpt", "3")),
        sharegpt(
            ("human", TASK), ("gpt", '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}\n</tool_call>')
        ),
        sharegpt(("human", TASK), ("gpt", "<tool_call>[]</tool_call>")),
        sharegpt(("human", TASK), ("tool", "x"), ("gpt", "4")),
        sharegpt(("system", SYSTEM), ("gpt", "4")),
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": "x"}]},
                {"role": "assistant", "content": "4"},
            ]
        },
        {
            "messages": [
                {"role": "user", "content": TASK},
                {
                    "role": "assistant",
                    "tool_calls": [{"type": "function", "function": {"name": "terminal", "arguments": "{not json"}}],
                },
            ]
        },
        ok,
    ]
    found = read_conversations(write(tmp_path, *lines[:3], "", *lines[3:]), TOOLS)
    assert [c.line for c in found.kept] == [1, 19]  # the blank line 4 is skipped, and counted
    reasons = {r.line: r.reason for r in found.refused}
    assert sorted(reasons) == [2, 3, *range(5, 19)]
    assert reasons[2].startswith("not valid JSON: ")
    assert reasons[3] == "not a JSON object (got a JSON list)"
    assert reasons[5] == 'has neither "messages" (OpenAI form) nor "conversations" (ShareGPT form)'
    assert reasons[6].startswith("message 2: unknown \"from\" 'narrator' (expected one of: system, human")
    assert reasons[7] == "message 2: unknown role 'function' (expected one of: system, user, assistant, tool)"
    assert reasons[8] == "assistant turn 1 has no text and no tool call"
    assert reasons[9] == "assistant turn 1 makes 1 tool call(s) but 2 tool result(s) answer it"
    assert reasons[10] == "assistant turn 1 makes 1 tool call(s) but 0 tool result(s) answer it"
    assert reasons[11] == "no assistant turn"
    assert reasons[12] == ("a user message after the first assistant turn is not supported: one task per conversation")
    assert reasons[13].startswith("message 2 (gpt): tool call #1: invalid JSON inside <tool_call>")
    assert reasons[14].startswith("message 2 (gpt): tool call #1: empty JSON list")
    assert reasons[15] == "a tool result comes before any assistant turn"
    assert reasons[16] == "no user message before the first assistant turn"
    assert reasons[17] == "message 1 (user): content part 'image_url' is not supported (text parts only)"
    assert reasons[18].startswith("message 2 (assistant) tool_calls[0]: arguments of 'terminal' are not valid JSON")
    assert found.summary(shown=2) == (f"kept 2, refused 16: line 2: {reasons[2]}; line 3: {reasons[3]}; ... 14 more")


def test_no_conversation_left_raises_naming_the_refusals(tmp_path: Path) -> None:
    found = read_conversations(write(tmp_path, "oops", sharegpt(("human", TASK))), TOOLS)
    with pytest.raises(
        ConversationFileError, match=r"no usable conversation \(kept 0, refused 2: line 1: not valid JSON"
    ) as info:
        found.require_kept()
    assert "line 2: no assistant turn" in str(info.value) and isinstance(info.value, ValueError)


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(ConversationFileError, match="no such file"):
        read_conversations(tmp_path / "missing.jsonl", TOOLS)
    with pytest.raises(ConversationFileError, match="is a directory"):
        read_conversations(tmp_path, TOOLS)
    (tmp_path / "empty.jsonl").write_text("\n  \n")
    with pytest.raises(ConversationFileError, match="is empty"):
        read_conversations(tmp_path / "empty.jsonl", TOOLS)
    (tmp_path / "latin1.jsonl").write_bytes(b'{"messages": "\xe9"}\n')
    with pytest.raises(ConversationFileError, match="not UTF-8"):
        read_conversations(tmp_path / "latin1.jsonl", TOOLS)
    (tmp_path / "pretty.json").write_text(json.dumps([SHAREGPT], indent=2))
    with pytest.raises(ConversationFileError, match="one JSON document, not JSONL"):
        read_conversations(tmp_path / "pretty.json", TOOLS)


def test_only_newlines_end_a_line(tmp_path: Path) -> None:
    record = sharegpt(("human", "a\u2028b\x85c"), ("gpt", "4"))
    path = tmp_path / "unicode.jsonl"
    path.write_text(json.dumps(record, ensure_ascii=False) + "\r\n" + json.dumps(record) + "\n", encoding="utf-8")
    found = read_conversations(path, TOOLS)
    assert [(c.line, c.prompt[0]["content"]) for c in found.kept] == [(1, "a\u2028b\x85c"), (2, "a\u2028b\x85c")]
