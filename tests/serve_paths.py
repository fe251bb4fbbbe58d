"""What the tests of rl_serve_model share across its sampling paths (the product's sampler, vLLM, the Tinker
path): a run's record on the local profile, and a chat request as Hermes 0.19 sends it to a served model
(stream, stream_options.include_usage, max_tokens 65536, tools) with its SSE stream read back as Hermes
reads it: content and tool-call deltas, finish reason, usage."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from rl_mcp.runs.store import RunRecord
from tinker_atropos.run_files import RunFiles

HERMES_MAX_TOKENS = 65536  # what Hermes 0.19 asks of every model


def run_record(home: Path, run_id: str, **trainer: Any) -> RunRecord:
    """A completed run of the local profile on tiny-chat whose config is a run's (`trainer` adds to its
    trainer section); its folder made, its weights left to the caller."""
    files = RunFiles(home / "runs" / run_id)
    files.logs_dir.mkdir(parents=True)
    section = {"backend": "local", "base_model": "tiny-chat", "total_steps": 1, "api_url": "http://127.0.0.1:1"}
    section.update(inference_port=2, run_dir=str(files.run_dir), run_name=run_id, lora_rank=8, **trainer)
    files.config.write_text(yaml.safe_dump({"env": {"group_size": 2}, "trainer": section}))
    return RunRecord(
        run_id=run_id, environment="letter_repeat", profile="local", status="completed",
        run_dir=str(files.run_dir), config_path=str(files.config), run_name=run_id,
        total_steps=1, api_port=1, inference_port=2, created_at=time.time(), ended_at=time.time(),
    )  # fmt: skip


@dataclass
class Streamed:
    """A streamed chat completion as a client assembles it."""

    headers: dict[str, str]
    chunks: list[dict[str, Any]]
    content: str = ""
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)  # (name, arguments parsed)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None


async def hermes_stream(url: str, model: str, messages: list[Any], tools: list[Any], **extra: Any) -> Streamed:
    """`messages` and `tools` sent to `url` (…/v1) in Hermes' request shape; every line must be an SSE
    `data:` event, the last `[DONE]`."""
    body = {
        "model": model,
        "messages": messages,
        "tools": tools,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": HERMES_MAX_TOKENS,
        **extra,
    }
    async with (
        httpx.AsyncClient(timeout=300, trust_env=False) as http,
        http.stream("POST", f"{url}/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200, (await response.aread()).decode()
        lines = [line async for line in response.aiter_lines() if line]
    assert lines and lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines), lines
    out = Streamed(dict(response.headers), [json.loads(line.removeprefix("data: ")) for line in lines[:-1]])
    calls: dict[int, dict[str, str]] = {}
    for chunk in out.chunks:
        assert chunk["object"] == "chat.completion.chunk" and chunk["model"] == model, chunk
        out.usage = chunk.get("usage") or out.usage
        for choice in chunk["choices"]:
            delta = choice["delta"]
            out.content += delta.get("content") or ""
            for piece in delta.get("tool_calls") or []:
                one = calls.setdefault(piece["index"], {"name": "", "arguments": ""})
                one["name"] += piece.get("function", {}).get("name") or ""
                one["arguments"] += piece.get("function", {}).get("arguments") or ""
            out.finish_reason = choice.get("finish_reason") or out.finish_reason
    out.tool_calls = [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())]
    return out
