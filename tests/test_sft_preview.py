"""rl_preview_sft through a real MCP client: the selection's supervised set built by the stage's
own process, per source, with its refusals, one example with its mask and a timed step; nothing
trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client
from test_progress import call_with_progress
from test_runs_mcp import call, environ, serving
from test_sft_runs import EDITS

from rl_mcp.sft import preview as preview_module

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def calculator_turn(expression: str) -> dict:
    arguments = json.dumps({"expression": expression})
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": arguments}}],
    }


def conversations_file(folder: Path) -> Path:
    """What a user brings: a good OpenAI-form line, a call of a tool the environment lacks, a broken line."""
    good = [
        {"role": "user", "content": "What is 12 + 30? Use the calculator tool."},
        calculator_turn("12 + 30"),
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "content": "42"},
    ]
    other_tool = [
        {"role": "user", "content": "List the files."},
        {
            "role": "assistant",
            "content": '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>',
        },
        {"role": "tool", "content": "a.txt"},
        {"role": "assistant", "content": "a.txt"},
    ]
    path = folder / "conversations.jsonl"
    path.write_text(json.dumps({"messages": good}) + "\n" + json.dumps({"messages": other_tool}) + "\n{not json\n")
    return path


async def test_the_preview_shows_each_source_its_refusals_and_an_example_with_its_mask(
    rl_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(preview_module, "REPORT_EVERY_S", 0.2)  # its waiting reports, within this short build
    async with serving(environ(rl_home)) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="tool_calculator")
        for field, value in EDITS.items():
            await call(client, "rl_edit_config", field=field, value=value)
        unset = await client.call_tool("rl_preview_sft", {})
        assert unset.is_error and "rl_edit_config(field='sft'" in str(unset.content)
        sft = {"sources": ["demonstrations", "file"], "file": str(conversations_file(rl_home)), "items": 3}
        await call(client, "rl_edit_config", field="sft", value={**sft, "batch_size": 2, "epochs": 2})
        preview, progress = await call_with_progress(client, "rl_preview_sft")
    assert progress.messages and all(m.startswith("building the supervised set") for m in progress.messages)
    assert preview["counts"] == {"demonstrations": {"kept": 3, "refused": 0}, "file": {"kept": 1, "refused": 2}}
    reasons = {r["origin"]: r["reason"] for r in preview["refused"]}
    assert "terminal" in reasons["line 2"] and "calculator" in reasons["line 2"]  # the tool asked, the one offered
    assert "JSON" in reasons["line 3"]
    assert preview["examples"] == 4 and preview["steps"] == 4  # 2 epochs of 2 batches of 2
    spans = preview["example"]["spans"]
    assert any(s["trained"] and "<tool_call>" in s["text"] for s in spans)
    assert not spans[0]["trained"] and "calculator" in spans[0]["text"]  # the tool prompt weighs nothing
    assert preview["seconds_per_step"] > 0 and preview["estimated_seconds"] == pytest.approx(
        4 * preview["seconds_per_step"], abs=0.1
    )
    assert 0 < preview["trained_tokens"] < preview["tokens"]
    assert not (Path(preview["folder"]) / "sft" / "steps.jsonl").exists()  # nothing trained


async def test_a_preview_with_nothing_left_says_why(rl_home: Path) -> None:
    async with serving(environ(rl_home)) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="tool_calculator")
        for field, value in {**EDITS, "sft": {"items": 2, "min_score": 2.0}}.items():
            await call(client, "rl_edit_config", field=field, value=value)
        preview = await call(client, "rl_preview_sft")
    assert preview["examples"] == 0 and "no supervised example is left" in preview["error"]
    assert all("under min_score 2" in r["reason"] for r in preview["refused"])
    assert preview["next_step"].startswith("No example is left")
