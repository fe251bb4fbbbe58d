"""A scripted OpenAI-compatible chat endpoint on loopback, for sessions of the real Hermes with
content a test decides: each task's replies chosen by a keyword of its first user message, the
n-th reply for the n-th assistant turn (the last repeats); a reply is text and tool calls, or an
HTTP error. Streams (Hermes 0.19 asks `stream: true`) or answers whole."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from loopback_http import send_json

Reply = dict[str, Any]  # {"content": str, "tool_calls": [{"name", "arguments"}]} or {"status": int, "error": str}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def scripted_handler(script: dict[str, list[Reply]]) -> type[BaseHTTPRequestHandler]:
    class Scripted(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # Hermes probes /api/show (Ollama's) first: none here
            self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            if not self.path.endswith("/chat/completions"):
                self._json(404, {"error": "not found"})
                return
            reply = _choose(script, body.get("messages") or [])
            if "status" in reply:
                self._json(reply["status"], {"error": {"message": reply["error"], "type": "invalid_request_error"}})
                return
            calls = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
                }
                for i, c in enumerate(reply.get("tool_calls") or [])
            ]
            finish = "tool_calls" if calls else "stop"
            usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            head = {"id": "scripted", "created": int(time.time()), "model": body.get("model", "scripted")}
            if not body.get("stream"):
                message = {
                    "role": "assistant",
                    "content": reply.get("content"),
                    **({"tool_calls": calls} if calls else {}),
                }
                choice = {"index": 0, "message": message, "finish_reason": finish}
                self._json(200, {**head, "object": "chat.completion", "choices": [choice], "usage": usage})
                return
            deltas: list[dict[str, Any]] = [{"role": "assistant", "content": reply.get("content") or ""}]
            if calls:
                deltas.append({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})
            chunks = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
            chunks += [
                {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                {"choices": [], "usage": usage},
            ]
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for chunk in chunks:
                self.wfile.write(
                    f"data: {json.dumps({**head, 'object': 'chat.completion.chunk', **chunk})}\n\n".encode()
                )
            self.wfile.write(b"data: [DONE]\n\n")

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            send_json(self, status, payload)

    return Scripted


def _choose(script: dict[str, list[Reply]], messages: list[dict[str, Any]]) -> Reply:
    task = next((m.get("content") for m in messages if m.get("role") == "user"), "")
    task = task if isinstance(task, str) else json.dumps(task)
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    for key, replies in script.items():
        if key in task:
            return replies[min(turn, len(replies) - 1)]
    return {"status": 400, "error": f"the script has no task in {task[:80]!r}"}
