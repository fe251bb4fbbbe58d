"""The hermes tool-call parser: valid calls, prose around them, and every malformed shape."""

from __future__ import annotations

import pytest

from tinker_atropos.agent.tool_calls import (
    SUPPORTED_PARSERS,
    ParsedReply,
    ToolCall,
    UnknownToolCallParser,
    format_tool_call,
    parse_tool_calls,
)


def test_several_calls_with_text_around() -> None:
    text = (
        "Let me look.\n<tool_call>\n"
        '{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>\nand\n'
        '<tool_call>{"name": "read_file", "arguments": {"path": "a.txt", "limit": 5}}</tool_call> done'
    )
    parsed = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("terminal", {"command": "ls"}),
        ("read_file", {"path": "a.txt", "limit": 5}),
    ]
    assert parsed.errors == []
    assert parsed.content == "Let me look.\n\nand\n done"
    assert len({c.id for c in parsed.calls}) == 2 and all(c.id.startswith("call_") for c in parsed.calls)


def test_plain_text_has_no_calls() -> None:
    assert parse_tool_calls("The answer is 4.") == ParsedReply(content="The answer is 4.", calls=[], errors=[])


def test_malformed_blocks_become_errors_and_valid_ones_survive() -> None:
    text = (
        "<tool_call>{not json}</tool_call>"
        '<tool_call>{"arguments": {}}</tool_call>'
        '<tool_call>{"name": "terminal", "arguments": [1, 2]}</tool_call>'
        '<tool_call>["terminal"]</tool_call>'
        '<tool_call>{"name": "terminal", "arguments": {"command": "pwd"}}</tool_call>'
    )
    parsed = parse_tool_calls(text)
    assert [c.arguments for c in parsed.calls] == [{"command": "pwd"}]
    assert len(parsed.errors) == 4
    assert "#1" in parsed.errors[0] and "invalid JSON" in parsed.errors[0]
    assert '"name"' in parsed.errors[1]
    assert "must be a JSON object" in parsed.errors[2] and "list" in parsed.errors[2]
    assert "JSON object" in parsed.errors[3]


def test_unclosed_tag_is_an_error_even_before_another_block() -> None:
    parsed = parse_tool_calls('<tool_call>{"name": "terminal", "arguments": {"command": "ls"}}')
    assert parsed.calls == [] and len(parsed.errors) == 1 and "unclosed" in parsed.errors[0]
    parsed = parse_tool_calls(
        '<tool_call>{"name": "a", "arguments": {}}\n<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    )
    assert [c.name for c in parsed.calls] == ["b"] and "unclosed" in parsed.errors[0]


def test_missing_or_string_encoded_arguments() -> None:
    parsed = parse_tool_calls(
        '<tool_call>{"name": "a"}</tool_call><tool_call>{"name": "b", "arguments": "{\\"x\\": 1}"}</tool_call>'
    )
    assert [(c.name, c.arguments) for c in parsed.calls] == [("a", {}), ("b", {"x": 1})]


def test_unknown_parser_lists_supported() -> None:
    with pytest.raises(UnknownToolCallParser, match="hermes") as info:
        parse_tool_calls("x", parser="mistral")
    assert isinstance(info.value, ValueError) and SUPPORTED_PARSERS == ("hermes",)


def test_format_round_trips() -> None:
    call = ToolCall(name="write_file", arguments={"path": "é.txt", "content": "a\nb"}, id="call_1")
    text = format_tool_call(call)
    assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>") and "é" in text
    (back,) = parse_tool_calls(text).calls
    assert (back.name, back.arguments) == (call.name, call.arguments)


# --- the forms small models write ---


def test_a_json_list_in_one_block_is_one_call_per_object() -> None:
    one = parse_tool_calls('<tool_call>[{"name": "terminal", "arguments": {"command": "ls"}}]</tool_call>')
    assert [(c.name, c.arguments) for c in one.calls] == [("terminal", {"command": "ls"})] and one.errors == []
    two = parse_tool_calls(
        'Both:\n<tool_call>\n[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]\n</tool_call>'
    )
    assert [(c.name, c.arguments) for c in two.calls] == [("a", {"x": 1}), ("b", {})]
    assert two.content == "Both:" and two.errors == [] and two.calls[0].id != two.calls[1].id


def test_an_empty_list_or_a_non_object_item_is_an_error() -> None:
    parsed = parse_tool_calls(
        '<tool_call>[]</tool_call><tool_call>[{"name": "a", "arguments": {}}, "b", {"arguments": {}}]</tool_call>'
    )
    assert [c.name for c in parsed.calls] == ["a"]
    assert len(parsed.errors) == 3
    assert parsed.errors[0].startswith("tool call #1: empty JSON list")
    assert parsed.errors[1].startswith("tool call #2: item 2 of the list:") and "JSON object" in parsed.errors[1]
    assert parsed.errors[2].startswith("tool call #2: item 3 of the list:") and '"name"' in parsed.errors[2]


def test_parameters_stands_for_arguments() -> None:
    parsed = parse_tool_calls('<tool_call>{"name": "terminal", "parameters": {"command": "ls"}}</tool_call>')
    assert [(c.name, c.arguments) for c in parsed.calls] == [("terminal", {"command": "ls"})]
    both = parse_tool_calls('<tool_call>{"name": "t", "arguments": {"a": 1}, "parameters": {"b": 2}}</tool_call>')
    assert both.calls[0].arguments == {"a": 1}
    bad = parse_tool_calls('<tool_call>{"name": "t", "parameters": 3}</tool_call>')
    assert bad.calls == [] and '"parameters" of' in bad.errors[0] and "int" in bad.errors[0]


def test_double_encoded_arguments_are_decoded_and_undecodable_ones_refused() -> None:
    parsed = parse_tool_calls(
        '<tool_call>{"name": "terminal", "arguments": "{\\"command\\": \\"ls -la\\"}"}</tool_call>'
        '<tool_call>{"name": "terminal", "parameters": "{\\"command\\": \\"pwd\\"}"}</tool_call>'
        '<tool_call>{"name": "terminal", "arguments": "ls"}</tool_call>'
    )
    assert [c.arguments for c in parsed.calls] == [{"command": "ls -la"}, {"command": "pwd"}]
    assert len(parsed.errors) == 1 and "#3" in parsed.errors[0] and "got str" in parsed.errors[0]


def test_the_openai_function_wrapper() -> None:
    parsed = parse_tool_calls(
        '<tool_call>{"type": "function", "function": {"name": "terminal", "arguments": "{\\"command\\": \\"ls\\"}"}}'
        '</tool_call><tool_call>{"function": {"name": "read_file", "arguments": {"path": "a"}}}</tool_call>'
        '<tool_call>[{"type": "function", "function": {"name": "x", "parameters": {}}}]</tool_call>'
    )
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("terminal", {"command": "ls"}),
        ("read_file", {"path": "a"}),
        ("x", {}),
    ]
    assert parsed.errors == []
    nameless = parse_tool_calls('<tool_call>{"type": "function", "function": {"arguments": {}}}</tool_call>')
    assert nameless.calls == [] and '"name"' in nameless.errors[0]


def test_a_code_fence_inside_the_tags_is_stripped() -> None:
    parsed = parse_tool_calls(
        'Running it.\n<tool_call>\n```json\n{"name": "terminal", "arguments": {"command": "ls"}}\n```\n</tool_call>'
        '<tool_call>```\n[{"name": "a", "arguments": {}}]\n```</tool_call>'
        '<tool_call>```json {"name": "b", "arguments": {}}```</tool_call>'
    )
    assert [c.name for c in parsed.calls] == ["terminal", "a", "b"]
    assert parsed.errors == [] and parsed.content == "Running it."
    broken = parse_tool_calls('<tool_call>```json\n{"name": "terminal",}\n```</tool_call>')
    assert broken.calls == [] and "invalid JSON" in broken.errors[0]
