"""Whether Hermes' fixed prompt leaves the model room to answer, measured before the first episode.

Hermes' system prompt and tool schemas are its own (4.6k SmolLM2 tokens with terminal,file; 25 tools by
default, over 11k): the run's model must hold them and still write a turn. The measure is Hermes' own
first request, caught by a loopback endpoint that answers nothing else (`capture_first_request`), then
rendered as the inference server renders it (the same chat template and tool scaffold).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any

CAPTURE_TIMEOUT_S = 120.0
REFUSED = b'{"error": {"message": "rl-mcp measures the prompt: no reply", "type": "invalid_request_error"}}'


class PromptDoesNotFit(RuntimeError):
    """The fixed prompt leaves fewer reply tokens than the config asks; the message has the figures."""


@dataclass(frozen=True)
class PromptFit:
    prompt_tokens: int  # Hermes' first request (system prompt, tools, an item's prompt), rendered
    context: int
    reply_tokens: int  # what a turn may sample (the config's ask)

    @property
    def left(self) -> int:
        return self.context - self.prompt_tokens

    def check(self, toolsets: tuple[str, ...]) -> None:
        if self.left >= self.reply_tokens:
            return
        raise PromptDoesNotFit(
            f"Hermes' fixed prompt with toolsets {','.join(toolsets)} is {self.prompt_tokens} tokens of this "
            f"model's {self.context}-token context, which leaves {max(self.left, 0)} for a reply where "
            f"max_turn_tokens asks {self.reply_tokens}: give the task set fewer toolsets (terminal,file is "
            "about 4,600 tokens, file alone about 2,800), lower max_turn_tokens, or train a model with a "
            "longer context"
        )


async def capture_first_request(run: Any) -> dict[str, Any]:
    """The body of the first chat completion Hermes sends, caught on a loopback port; `run(url)` starts
    Hermes against `url` (…/v1) and returns when it has ended (it fails: nothing answers it)."""
    caught: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            head = await reader.readuntil(b"\r\n\r\n")
            line, *headers = head.decode("latin-1").split("\r\n")
            size = next((int(h.split(":", 1)[1]) for h in headers if h.lower().startswith("content-length:")), 0)
            body = await reader.readexactly(size) if size else b""
            if line.startswith("POST") and "/chat/completions" in line and not caught.done():
                caught.set_result(json.loads(body))
                status, payload = b"400 Bad Request", REFUSED
            else:
                status, payload = b"404 Not Found", b'{"error": {"message": "not found"}}'
            writer.write(
                b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\nconnection: close\r\n"
                b"content-length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
            )
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        hermes = asyncio.ensure_future(run(f"http://127.0.0.1:{port}/v1"))
        await asyncio.wait({hermes, caught}, timeout=CAPTURE_TIMEOUT_S, return_when="FIRST_COMPLETED")
        if caught.done():
            hermes.cancel()
            with contextlib.suppress(BaseException):
                await hermes
            return caught.result()
        said = ""
        if hermes.done() and not hermes.cancelled() and hermes.exception() is None:
            said = str(hermes.result())
        hermes.cancel()
        raise RuntimeError(
            f"Hermes sent no chat completion to measure its prompt within {CAPTURE_TIMEOUT_S:g} s"
            + (f"; it said: {said[-1500:]}" if said else "")
        )
