"""Runs in the verifiers v1 venv (verifiers 0.4.0), never in the product's: stdlib and verifiers only.

    python v1_child.py --file ENV.py --args '{"num_tasks": 8}' --tokenizer MODEL_DIR

Loads the environment (a file's `load_environment(config)`, its config class built from `--args`;
with `--module`, an importable taskset id), then speaks classic_child.py's JSON lines: first
`{"ready": true, "train": N, "eval": M}` (or `{"error": ...}` before an exit), then per request
`{"id", "split", "index", "n", "model", "base_url", "sampling"}` -> `{"id", "rollouts": [...]}` or
`{"id", "error"}`. v1 tasksets have no splits: both index the taskset's tasks (verifiers evaluates
on the taskset too). A rollout is one episode: reward, metrics (the rewards and @metric values),
error, truncation, stop condition, prompt and completion messages, and the trainable branch's exact
tokens (`sequence`: token ids, True where the model sampled, sampler logprobs, 0.0 elsewhere).

Model calls go through verifiers' TrainClient to the product server's `/inference/v1/generate`,
rendered with the model's own chat template (`--tokenizer`, a local folder: nothing is fetched).
Harnesses run in the subprocess runtime (verifiers' default, Prime, needs a login and the network),
and their PEP 723 programs on this venv's interpreter when it has what they declare (verifiers'
`uv sync` would need the network).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import re
import sys
import tomllib
import typing
import uuid
from pathlib import Path
from typing import Any, Literal, TextIO

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import child_lines  # a sibling: this runs as a script
import v1_warm
import verifiers.v1 as vf  # after the offline switches
from renderers.base import (
    ParsedResponse,
    ParsedToolCall,
    RenderedTokens,
    ToolCallParseStatus,
    extract_message_tool_names,
)
from renderers.configs import BaseRendererConfig, CustomRendererConfig
from renderers.default import DefaultRenderer
from verifiers.v1.mcp import launch as vf_launch
from verifiers.v1.runtimes import subprocess as vf_subprocess

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(</tool_call>|$)", re.S)
PEP_723 = re.compile(r"(?m)^# /// script$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
TOOLS_SYSTEM = (
    "You may call functions. Their signatures are in <tools></tools>:\n<tools>\n{tools}\n</tools>\n"
    'To call one, reply with <tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)


# --- the renderer: the model's chat template, tool calls as Hermes-style text ---------------------


class ToolTextRendererConfig(BaseRendererConfig):
    name: Literal["rl-mcp-tool-text"] = "rl-mcp-tool-text"


class ToolTextRenderer(DefaultRenderer):
    """DefaultRenderer (the tokenizer's chat template) with tools for any template: the tools in the
    system turn, calls and results as `<tool_call>` / `<tool_response>` text (small chat models have
    no tool tokens and their templates drop `tools`), and a bridge that extends the sampled ids, so
    a multi-turn episode is one sequence of exactly the ids the server sampled."""

    config_class = ToolTextRendererConfig

    def __init__(self, tokenizer: Any, config: Any = None) -> None:
        super().__init__(tokenizer, None)

    @property
    def supports_tools(self) -> bool:
        return True

    def render(self, messages: list[Any], *, tools: list[Any] | None = None, **kwargs: Any) -> RenderedTokens:
        return super().render(_as_text(messages, tools), tools=None, **kwargs)

    def render_ids(self, messages: list[Any], *, tools: list[Any] | None = None, **kwargs: Any) -> list[int]:
        return super().render_ids(_as_text(messages, tools), tools=None, **kwargs)

    def parse_response(
        self, token_ids: list[int], *, tools: list[Any] | None = None, prompt_ids: list[int] | None = None
    ) -> ParsedResponse:
        parsed = super().parse_response(token_ids, prompt_ids=prompt_ids)
        if not tools:
            return parsed
        calls = [_tool_call(m) for m in TOOL_CALL.finditer(parsed.content)]
        content = TOOL_CALL.sub("", parsed.content).strip() if calls else parsed.content
        return ParsedResponse(content=content, reasoning_content=parsed.reasoning_content, tool_calls=calls)

    def bridge_to_next_turn(
        self,
        previous_prompt_ids: list[int],
        previous_completion_ids: list[int],
        new_messages: list[Any],
        *,
        tools: list[Any] | None = None,
    ) -> RenderedTokens | None:
        """The previous prompt and reply as sampled, then what the template writes after a closed
        assistant turn and before the next one (learned from rendering a stand-in conversation)."""
        stops = set(self.get_stop_token_ids())
        if not previous_completion_ids or previous_completion_ids[-1] not in stops:
            return None  # cut at its length: the template would close it, the model did not
        if not new_messages or any(m.get("role") not in ("user", "tool") for m in new_messages):
            return None
        stand_in = [{"role": r, "content": r[0]} for r in ("system", "user", "assistant")]
        closed = self.render_ids(stand_in, tools=tools)
        extended = self.render_ids([*stand_in, *new_messages], tools=tools, add_generation_prompt=True)
        ends = [i for i, t in enumerate(closed) if t in stops]
        if not ends or extended[: len(closed)] != closed:
            return None
        ids = [*previous_prompt_ids, *previous_completion_ids, *closed[ends[-1] + 1 :], *extended[len(closed) :]]
        return RenderedTokens(
            token_ids=ids,
            message_indices=[-1] * len(ids),
            sampled_mask=[False] * len(ids),
            message_roles=[m.get("role") or "" for m in new_messages],
            message_tool_names=extract_message_tool_names(new_messages),
        )


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _as_text(messages: list[Any], tools: list[Any] | None) -> list[dict[str, str]]:
    """Messages as the template's plain role/content turns, tools and tool traffic written out."""
    out = []
    for m in messages:
        content = _text(m.get("content"))
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = [_call_text(tc.get("function", tc)) for tc in m["tool_calls"]]
            content = "\n".join([content, *calls] if content else calls)
        elif m.get("role") == "tool":
            content = f"<tool_response>\n{content}\n</tool_response>"
        out.append({"role": m.get("role") or "user", "content": content})
    if tools:
        described = TOOLS_SYSTEM.format(tools="\n".join(json.dumps(t.get("function", t)) for t in tools))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{described}"}
        else:
            out.insert(0, {"role": "system", "content": described})
    return out


def _call_text(function: dict[str, Any]) -> str:
    args = function.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    return "<tool_call>\n" + json.dumps({"name": function.get("name"), "arguments": args}) + "\n</tool_call>"


def _tool_call(match: re.Match[str]) -> ParsedToolCall:
    raw = match.group(1)
    try:
        call = json.loads(raw)
    except json.JSONDecodeError:
        return ParsedToolCall(raw=raw, status=ToolCallParseStatus.INVALID_JSON)
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return ParsedToolCall(raw=raw, status=ToolCallParseStatus.INVALID_JSON)
    closed = ToolCallParseStatus.OK if match.group(2) else ToolCallParseStatus.UNCLOSED_BLOCK
    return ParsedToolCall(raw=raw, name=call["name"], arguments=call.get("arguments") or {}, status=closed)


# --- harness programs on this interpreter ----------------------------------------------------------


def _missing(source: str) -> list[str]:
    """The dependencies a PEP 723 script declares that this venv does not satisfy."""
    from packaging.requirements import Requirement

    block = PEP_723.search(source)
    if block is None:
        return []
    lines = block.group("content").splitlines(keepends=True)
    declared = tomllib.loads("".join(line[2:] if line.startswith("# ") else line[1:] for line in lines))
    missing = []
    for dep in declared.get("dependencies", []):
        req = Requirement(dep)
        try:
            found = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            found = None
        if found is None or not req.specifier.contains(found, prereleases=True):
            missing.append(dep)
    return missing


_uv_prepare = vf.Runtime.prepare_uv_script


async def _prepare_here(
    self: vf.Runtime, script: str | bytes, env: dict[str, str] | None = None, *, activate: bool = True
) -> list[str]:
    """`Runtime.prepare_uv_script` for the subprocess runtime: the script on this interpreter."""
    if self.type != "subprocess":
        return await _uv_prepare(self, script, env, activate=activate)
    data = script.encode() if isinstance(script, str) else script
    if missing := _missing(data.decode()):
        raise RuntimeError(f"the harness program needs {missing}, which {sys.prefix} lacks (uv would fetch them)")
    path = Path(self.scripts_dir) / f"{hashlib.sha256(data).hexdigest()}.py"
    await asyncio.to_thread(_write_once, path, data)
    return [sys.executable, str(path)]


def _write_once(path: Path, data: bytes) -> None:
    """The script's file, written whole under its content's name: a group's rollouts run the same
    script at once, and rewriting it in place let one run a file another had just truncated (an
    empty episode, no error) or half written (a SyntaxError)."""
    if path.is_file():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    partial.write_bytes(data)
    os.replace(partial, path)


_read_back_port = vf_launch._read_back_port


async def _read_back_port_once(runtime: vf.Runtime, path: str) -> int:
    """verifiers' port read-back, then the port file removed: verifiers names it `/tmp/vf-port-<uuid>`
    on every tool-server launch (one per rollout with tools) and never removes it."""
    try:
        return await _read_back_port(runtime, path)
    finally:
        await runtime.run(["rm", "-f", path], {})


# --- loading ---------------------------------------------------------------------------------------


def _seats(config: Any) -> dict[str, Any]:
    return {
        name: value for name in type(config).model_fields if isinstance(value := getattr(config, name), vf.AgentConfig)
    }


def _local(config: Any) -> Any:
    """The config with every agent seat in the subprocess runtime."""
    seats = {name: seat.model_copy(update={"runtime": vf.SubprocessConfig()}) for name, seat in _seats(config).items()}
    return config.model_copy(update=seats) if seats else config


def _load(file: str | None, module: str | None, args: dict[str, Any]) -> Any:
    if module is not None and importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(f"no module {module!r} here")
    if file is not None:
        path = Path(file).resolve()
        sys.path.insert(0, str(path.parent))  # sibling imports, and the file as its taskset id
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path.parent), os.environ.get("PYTHONPATH")]))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = mod  # toolsets run as `python -m <stem>`, tasksets load by that id
        spec.loader.exec_module(mod)
    else:
        assert module is not None
        mod = importlib.import_module(module)
    entry = getattr(mod, "load_environment", None)
    if entry is None:  # a taskset package: its own env, or the single-agent one
        taskset = {**args.get("taskset", {}), "id": module}
        return vf.load_environment(_local(vf.resolve_env_config({**args, "taskset": taskset})))
    first = next(iter(inspect.signature(entry).parameters))
    config_class = typing.get_type_hints(entry).get(first, vf.EnvConfig)
    return entry(_local(config_class.model_validate(args)))


class Child:
    """The loaded environment, answering group requests."""

    def __init__(self, env: Any, tokenizer: str) -> None:
        remote = {
            name: seat.runtime.type for name, seat in _seats(env.config).items() if seat.runtime.type != "subprocess"
        }
        if remote:
            raise ValueError(f"agent runtimes {remote}: this process runs harnesses in the subprocess runtime only")
        if not env.taskset.bounded:
            raise ValueError("the taskset is infinite: a training run needs its tasks counted")
        self.env = env
        self.tasks = list(env.taskset)
        self.tokenizer = tokenizer

    def _context(self, req: dict[str, Any]) -> vf.ModelContext:
        os.environ.setdefault(child_lines.KEY_VAR, "local")
        renderer = CustomRendererConfig(import_path=f"{__name__}.ToolTextRenderer")
        client = vf.TrainClientConfig(
            base_url=req["base_url"],
            api_key_var=child_lines.KEY_VAR,
            renderer=renderer,
            renderer_model_name=self.tokenizer,
        )
        return vf.ModelContext(model=req["model"], client=client, sampling=vf.SamplingConfig(**req.get("sampling", {})))

    async def group(self, req: dict[str, Any]) -> list[dict[str, Any]]:
        task, ctx = self.tasks[int(req["index"])], self._context(req)
        episodes = await asyncio.gather(*(self.env.run_slot(s, ctx) for s in self.env.slots(task, int(req["n"]))))
        return [_rollout(e) for e in episodes]


def _message(msg: Any) -> dict[str, Any]:
    data = msg.model_dump(mode="json", exclude_none=True) if hasattr(msg, "model_dump") else dict(msg)
    data["content"] = _text(data.get("content"))
    return data


def _rollout(episode: Any) -> dict[str, Any]:
    """One episode as the host reads it: its trainable trace, that trace's last trainable branch."""
    traces = [t for t in episode.traces if t.agent.trainable] or list(episode.traces)
    trace = traces[0] if traces else None
    errors = [*episode.errors, *(trace.errors if trace is not None else [])]
    branches = [b for b in trace.branches if b.trainable] if trace is not None else []
    branch = branches[-1] if branches else None
    messages = [_message(m) for m in (branch.messages if branch is not None else [])]
    first_reply = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    scores = {name: r.score for name, r in trace.rewards.items() if r is not None} if trace is not None else {}
    values = {**scores, **(trace.metrics if trace is not None else {})}
    return {
        "reward": float(trace.reward or 0.0) if trace is not None else 0.0,
        "metrics": {k: float(v) for k, v in values.items() if isinstance(v, (int, float))},
        "error": f"{errors[0].type}: {errors[0].message}" if errors else None if trace is not None else "no trace",
        "truncated": bool(trace is not None and trace.is_truncated),
        "stop": trace.stop_condition if trace is not None else None,
        "prompt": messages[:first_reply],
        "completion": messages[first_reply:],
        "sequence": {
            "token_ids": list(branch.token_ids) if branch is not None else [],
            "sampled_mask": [bool(m) for m in branch.sampled_mask] if branch is not None else [],
            "logprobs": [float(x) for x in branch.logprobs] if branch is not None else [],
        },
    }


async def serve(child: Child, out: TextIO) -> None:
    async with child.env.serving():  # the interception server and shared tools, for the child's life
        await child_lines.serve(child.group, out, len(child.tasks), len(child.tasks))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--file")
    where.add_argument("--module")
    parser.add_argument("--args", default="{}", help="the environment config's fields, as JSON")
    parser.add_argument("--tokenizer", required=True, help="the served model's folder (tokenizer, chat template)")
    opts = parser.parse_args()
    out = child_lines.private_stdout()
    vf.Runtime.prepare_uv_script = _prepare_here  # type: ignore[method-assign]
    vf_launch._read_back_port = _read_back_port_once
    try:
        child = Child(_load(opts.file, opts.module, json.loads(opts.args)), opts.tokenizer)
    except Exception as exc:
        child_lines.load_failed(out, exc)
    warm = v1_warm.start(close=[out])
    if warm is not None:
        v1_warm.install(vf_subprocess, warm)
    asyncio.run(serve(child, out))
    if warm is not None:  # where a rollout's programs came from (tests read it)
        print(f"warm starts: {warm.forked} programs forked, {warm.cold} started cold", file=sys.stderr)


if __name__ == "__main__":
    main()
