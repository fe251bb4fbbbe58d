"""The agent's tools, under hermes-agent 0.19's names, schemas and toolsets, run in a Sandbox.

A call never raises: an unknown tool, arguments that break the schema, a path outside the
sandbox or an expired sandbox all come back as `ToolResult(error=True)` with a message the
model can act on. Results are the JSON strings Hermes returns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import shlex
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import jsonschema

from tinker_atropos.agent import file_tools, task_sandboxes
from tinker_atropos.agent.sandboxes import Sandbox, SandboxEscape, SandboxExpired, SandboxUnavailable
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
DOWNLOAD_CAP_BYTES = 1024**3  # the sandbox's own file size limit (RLIMIT_FSIZE default)
_NO_NETWORK = (
    "{tool} is not available in rl-mcp's sandboxes (no network, no browser): "
    "verify with terminal, read_file or search instead"
)
T = TypeVar("T")

Handler = Callable[[Sandbox, dict[str, Any], int], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class ToolResult:
    content: str
    error: bool = False
    ends_episode: bool = False  # the environment said its episode is over (an OpenEnv `done`): no further turn


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
        command = f"cd {shlex.quote(sb.shell_name(args['workdir']))} && {command}"
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
    """The tools of one rollout, found by its task id (Hermes' `ToolContext(task_id)`): the agent
    loop awaits `call`; reward code gets Hermes' synchronous methods on the same sandbox, to check
    the agent's work where the agent left it. The sandbox opens on first use if nothing opened it
    (`task_sandboxes`); `cleanup()` closes it."""

    def __init__(self, task_id: str, tools: list[str] | None = None) -> None:
        self.task_id = task_id
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

    async def sandbox(self) -> Sandbox:
        """This rollout's sandbox (opened now if nothing has opened it yet)."""
        return await task_sandboxes.get(self.task_id)

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
        try:
            sandbox = await self.sandbox()
            result = await HANDLERS[name](sandbox, arguments, sandbox.config.max_output_chars)
        except (SandboxEscape, SandboxExpired, SandboxUnavailable) as exc:
            return _error(f"{name}: {exc}")
        except OSError as exc:
            return _error(f"{name}: {exc.strerror or exc}")
        failed = bool(result.get("error")) or result.get("success") is False
        return ToolResult(json.dumps(result, ensure_ascii=False), error=failed)

    # --- Hermes' ToolContext, for compute_reward: synchronous, every tool, results as dicts ---

    def terminal(self, command: str, timeout: int = 180) -> dict[str, Any]:
        """Run `command` in the rollout's shell: {"output", "exit_code", "error"}."""
        return _as_dict(self.call_tool("terminal", {"command": command, "timeout": timeout}))

    def read_file(self, path: str) -> dict[str, Any]:
        """The read_file tool's answer ({"content": "1|...", "total_lines", ...} or {"error"})."""
        return _as_dict(self.call_tool("read_file", {"path": path}))

    def write_file(self, path: str, content: str) -> dict[str, Any]:
        return _as_dict(self.call_tool("write_file", {"path": path, "content": content}))

    def search(self, query: str, path: str = ".") -> dict[str, Any]:
        return _as_dict(self.call_tool("search_files", {"pattern": query, "path": path}))

    def upload_file(self, local_path: str, remote_path: str) -> dict[str, Any]:
        """Copy a host file into the sandbox (any bytes): {"exit_code", "output"}."""
        local = Path(local_path)
        if not local.is_file():
            return {"exit_code": -1, "output": f"Local file not found: {local_path}"}
        return self._sandboxed(
            lambda sb: sb.write_bytes(remote_path, local.read_bytes()), {"exit_code": 0, "output": ""}
        )

    def upload_dir(self, local_dir: str, remote_dir: str) -> list[dict[str, Any]]:
        local = Path(local_dir)
        if not local.is_dir():
            return [{"exit_code": -1, "output": f"Local directory not found: {local_dir}"}]
        return [
            self.upload_file(str(f), f"{remote_dir}/{f.relative_to(local)}")
            for f in sorted(local.rglob("*"))
            if f.is_file()
        ]

    def download_file(self, remote_path: str, local_path: str) -> dict[str, Any]:
        """Copy a sandbox file to the host: {"success", "bytes"} or {"success": False, "error"}."""

        async def fetch(sb: Sandbox) -> dict[str, Any]:
            data = await sb.read_bytes(remote_path, DOWNLOAD_CAP_BYTES)
            Path(local_path).parent.mkdir(parents=True, exist_ok=True)
            Path(local_path).write_bytes(data)
            return {"success": True, "bytes": len(data)}

        return self._sandboxed(fetch, None)

    def download_dir(self, remote_dir: str, local_dir: str) -> list[dict[str, Any]]:
        listing = self.terminal(f"cd {shlex.quote(remote_dir)} && find . -type f", timeout=30)
        if listing.get("exit_code") != 0 or not listing.get("output", "").strip():
            return [{"success": False, "error": f"Remote directory is empty or missing: {remote_dir}"}]
        rows = [ln.strip().removeprefix("./") for ln in listing["output"].splitlines() if ln.strip()]
        return [self.download_file(f"{remote_dir}/{rel}", str(Path(local_dir) / rel)) for rel in rows]

    def web_search(self, query: str) -> dict[str, Any]:
        return {"error": _NO_NETWORK.format(tool="web_search")}

    def web_extract(self, urls: list[str]) -> dict[str, Any]:
        return {"error": _NO_NETWORK.format(tool="web_extract")}

    def browser_navigate(self, url: str) -> dict[str, Any]:
        return {"error": _NO_NETWORK.format(tool="browser_navigate")}

    def browser_snapshot(self) -> dict[str, Any]:
        return {"error": _NO_NETWORK.format(tool="browser_snapshot")}

    def call_tool(self, tool_name: str, arguments: dict[str, Any]) -> str:
        """Any tool by name, whatever the policy was offered; the raw JSON string it returns."""
        known = [tool_name] if tool_name in HANDLERS else []
        return _blocking(ToolContext(self.task_id, known).call(tool_name, arguments)).content

    def cleanup(self) -> None:
        """Kill the rollout's processes and remove its sandbox (the base env also does it after
        compute_reward; a second call does nothing)."""
        _blocking(task_sandboxes.close(self.task_id))

    def _sandboxed(self, act: Callable[[Sandbox], Awaitable[Any]], done: dict[str, Any] | None) -> dict[str, Any]:
        """Run `act` on the sandbox from reward code; `done` (else act's own value) on success."""

        async def run() -> Any:
            value = await act(await self.sandbox())
            return value if done is None else done

        try:
            return _blocking(run())
        except (SandboxEscape, SandboxExpired, SandboxUnavailable, OSError) as exc:
            return {"success": False, "exit_code": -1, "error": str(exc), "output": str(exc)}


def _blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to its end from synchronous code, as Hermes' ToolContext does: on this thread
    when no event loop runs here, else on a helper thread with a loop of its own (the sandbox
    runs one subprocess per command, so it is bound to no loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _as_dict(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {"error": raw}
    return value if isinstance(value, dict) else {"result": value}


def _error(message: str) -> ToolResult:
    logger.debug("tool error: %s", message)
    return ToolResult(json.dumps({"error": message}, ensure_ascii=False), error=True)
