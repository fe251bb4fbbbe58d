"""The agent's tools, under hermes-agent 0.19's names, schemas and toolsets, run in a Sandbox.

A call never raises: an unknown tool, arguments that break the schema, a path outside the
sandbox or an expired sandbox all come back as `ToolResult(error=True)` with a message the
model can act on. Results are the JSON strings Hermes returns.
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import jsonschema

from tinker_atropos.agent import file_tools
from tinker_atropos.agent.sandbox import Sandbox, SandboxEscape, SandboxExpired
from tinker_atropos.agent.tool_schemas import TOOL_SCHEMAS

__all__ = ["TOOLSETS", "TOOL_SCHEMAS", "ToolContext", "ToolResult", "select_tools"]

logger = logging.getLogger(__name__)

# Hermes' toolsets.py: "terminal" = terminal + process, "file" = the four file tools. `process`
# (background jobs) is not offered here: rollouts run commands in the foreground.
TOOLSETS: dict[str, tuple[str, ...]] = {
    "terminal": ("terminal",),
    "file": ("read_file", "write_file", "patch", "search_files"),
}
FOREGROUND_MAX_TIMEOUT = 600  # Hermes rejects longer foreground timeouts

Handler = Callable[[Sandbox, dict[str, Any], int], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class ToolResult:
    content: str
    error: bool = False


def select_tools(enabled_toolsets: list[str] | None, disabled_toolsets: list[str] | None) -> list[str]:
    """Tool names of the enabled toolsets (all when None) minus those of the disabled ones."""
    for name in (*(enabled_toolsets or ()), *(disabled_toolsets or ())):
        if name not in TOOLSETS:
            raise ValueError(f"unknown toolset {name!r}; known toolsets: {', '.join(TOOLSETS)}")
    enabled = list(TOOLSETS) if enabled_toolsets is None else enabled_toolsets
    off = {tool for ts in disabled_toolsets or () for tool in TOOLSETS[ts]}
    names = [tool for ts in enabled for tool in TOOLSETS[ts] if tool not in off]
    return list(dict.fromkeys(names))


async def _terminal(sb: Sandbox, args: dict[str, Any], max_chars: int) -> dict[str, Any]:
    if args.get("background"):
        return {
            "output": "",
            "exit_code": -1,
            "error": "background=true is not available in this sandbox (no process tool): "
            "run the command in the foreground with a suitable timeout",
            "status": "error",
        }
    timeout = args.get("timeout")
    if timeout and timeout > FOREGROUND_MAX_TIMEOUT:
        return {
            "error": f"Foreground timeout {timeout}s exceeds the maximum of {FOREGROUND_MAX_TIMEOUT}s. "
            "Use background=true with notify_on_complete=true for long-running commands."
        }
    command = args["command"]
    if args.get("workdir"):
        command = f"cd {shlex.quote(str(sb.resolve(args['workdir'])))} && {command}"
    result = await sb.run(command, timeout)
    output, exit_code = result.output, result.exit_code
    if result.timed_out:
        seconds = timeout or sb.config.timeout_s
        output, exit_code = f"{output}\n[Command timed out after {seconds:g}s]", 124
    output = output.strip()
    if len(output) > max_chars:  # the sandbox already bounds it; this covers the suffix
        output = output[: max_chars // 2] + "\n... [OUTPUT TRUNCATED] ...\n" + output[-max_chars // 2 :]
    return {
        "output": output,
        "exit_code": -1 if exit_code is None else exit_code,
        "error": None,
    }


HANDLERS: dict[str, Handler] = {
    "terminal": _terminal,
    "read_file": file_tools.read_file,
    "write_file": file_tools.write_file,
    "patch": file_tools.patch,
    "search_files": file_tools.search_files,
}


class ToolContext:
    """The tools of one rollout, bound to its sandbox; `compute_reward` uses the same instance
    (or the convenience coroutines) to check the agent's work where the agent left it."""

    def __init__(self, sandbox: Sandbox, tools: list[str] | None = None) -> None:
        self.sandbox = sandbox
        self.tools = list(HANDLERS) if tools is None else tools
        unknown = [t for t in self.tools if t not in HANDLERS]
        if unknown:
            raise ValueError(f"unknown tools {unknown}; known: {', '.join(HANDLERS)}")
        self._validators = {
            t: jsonschema.Draft202012Validator(TOOL_SCHEMAS[t]["function"]["parameters"]) for t in self.tools
        }

    @property
    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI `tools=` list for this context's tools."""
        return [TOOL_SCHEMAS[t] for t in self.tools]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name not in self._validators:
            return _error(f"Unknown tool: {name!r}. Available tools: {', '.join(self.tools) or 'none'}")
        if not isinstance(arguments, dict):
            return _error(f"{name}: arguments must be a JSON object, got {type(arguments).__name__}")
        problems = sorted(self._validators[name].iter_errors(arguments), key=lambda e: list(e.path))
        if problems:
            params = TOOL_SCHEMAS[name]["function"]["parameters"]
            where = ["/".join(map(str, e.path)) or "arguments" for e in problems]
            detail = "; ".join(f"{w}: {e.message}" for w, e in zip(where, problems))
            return _error(
                f"{name}: invalid arguments ({detail}). Parameters: {', '.join(params['properties'])}; "
                f"required: {', '.join(params.get('required', []))}"
            )
        max_chars = self.sandbox.config.max_output_chars
        try:
            result = await HANDLERS[name](self.sandbox, arguments, max_chars)
        except (SandboxEscape, SandboxExpired) as exc:
            return _error(f"{name}: {exc}")
        except OSError as exc:
            return _error(f"{name}: {exc.strerror or exc}")
        failed = bool(result.get("error")) or result.get("success") is False
        return ToolResult(json.dumps(result, ensure_ascii=False), error=failed)

    async def terminal(self, command: str, timeout: int | None = None) -> dict[str, Any]:
        """Run `command` in the rollout's shell: {"output", "exit_code", "error"}."""
        args: dict[str, Any] = {"command": command} | ({"timeout": timeout} if timeout else {})
        return json.loads((await self._direct("terminal", args)).content)

    async def read_file(self, path: str) -> str | None:
        """The file's text, or None when it does not exist (or is outside the sandbox)."""
        try:
            data = await self.sandbox.read_bytes(path, file_tools.READ_CAP_BYTES)
        except (OSError, SandboxEscape):
            return None
        return data.decode("utf-8", "replace")

    async def write_file(self, path: str, content: str) -> ToolResult:
        return await self._direct("write_file", {"path": path, "content": content})

    async def _direct(self, name: str, args: dict[str, Any]) -> ToolResult:
        """Reward code may use every tool, whatever the policy was offered."""
        return await ToolContext(self.sandbox, [name]).call(name, args)


def _error(message: str) -> ToolResult:
    logger.debug("tool error: %s", message)
    return ToolResult(json.dumps({"error": message}, ensure_ascii=False), error=True)
