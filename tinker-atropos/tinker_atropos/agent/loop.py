"""The agent loop: sample an assistant turn, run its tool calls, feed the results back, repeat.

Two phases, as in Hermes' HermesAgentLoop:

- Phase 1 (an OpenAI-compatible chat endpoint: OpenRouter, any base_url): `chat_completion`
  with `tools=`, the server's native `tool_calls` (or `<tool_call>` text parsed here when the
  server returns none). For `process` runs and evaluation; tokens are rebuilt afterwards from
  the messages, without sampler logprobs.
- Phase 2 (atroposlib's managed server over a token endpoint: the local inference server, Tinker
  behind it, sglang, vllm): token ids in, token ids + logprobs out, the reply parsed client-side
  with `parse_tool_calls(text, tool_call_parser)`. The rollout is ONE token sequence: each turn's
  prompt is the previous sequence plus the chat template's scaffolding for the tool results, so
  only the policy's sampled tokens are trained (mask -100 elsewhere), with their logprobs.

A malformed or unknown tool call goes back to the model as a tool error and is counted; it never
ends the rollout. The rollout ends when a turn calls no tool, after `max_turns` turns, or when
the context (`max_context` tokens) is full.

With a `TextAction` (an environment whose one action a model can take in words), no tool is offered:
each reply, whole, is a call of that action's tool (counted as one), and its result is the next user
message, until the tool ends the episode or the turns run out.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tinker_atropos.agent import task_sandboxes
from tinker_atropos.agent.chat_format import ChatScaffold, openai_tool_calls
from tinker_atropos.agent.result_budget import DEFAULT_BUDGET, BudgetConfig, apply_budget
from tinker_atropos.agent.tool_calls import ToolCall, parse_tool_calls
from tinker_atropos.agent.tools import ToolContext, ToolResult

logger = logging.getLogger(__name__)
_warned: set[str] = set()


def _warn_once(message: str, *args: object) -> None:
    """A per-rollout condition, logged once per process instead of once per rollout."""
    if message not in _warned:
        _warned.add(message)
        logger.warning(message, *args)


DEFAULT_MAX_CONTEXT = 4096  # tokens per rollout when neither max_context nor max_tokens is given
PROMPT_MASK = -100
PROMPT_LOGPROB = 1.0  # atroposlib's placeholder on masked positions (batches.py ignores it)
ToolHandler = Callable[[str, dict[str, Any]], Awaitable[ToolResult]]


@dataclass
class ToolError:
    """One failed tool call (Hermes' fields)."""

    turn: int
    tool_name: str
    arguments: str
    error: str
    tool_result: str


@dataclass
class TokenTrace:
    """One rollout's token sequence: trained positions carry their sampling logprobs."""

    tokens: list[int] = field(default_factory=list)
    masks: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)

    def add_context(self, tokens: list[int]) -> None:
        self.tokens += tokens
        self.masks += [PROMPT_MASK] * len(tokens)
        if self.logprobs is not None:
            self.logprobs += [PROMPT_LOGPROB] * len(tokens)

    def add_sampled(self, tokens: list[int], logprobs: list[float] | None) -> None:
        self.tokens += tokens
        self.masks += tokens
        if logprobs is None or self.logprobs is None:
            self.logprobs = None
        else:
            self.logprobs += list(logprobs)

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class TextAction:
    """A plain reply taken as an action: a call of `tool` with the reply as its `field` (a cold model
    writes no tool call, but it does answer in words: OpenEnv's `action_mode: text`)."""

    tool: str
    field: str


@dataclass
class AgentResult:
    """What a rollout produced (Hermes' field names, plus the token trace and call counts)."""

    messages: list[dict[str, Any]]
    managed_state: dict[str, Any] | None = None
    turns_used: int = 0
    finished_naturally: bool = False
    reasoning_per_turn: list[str | None] = field(default_factory=list)
    tool_errors: list[ToolError] = field(default_factory=list)
    tool_calls: int = 0
    trace: TokenTrace | None = None
    stop_reason: str = ""  # answered | max_turns | context | error | done (the environment ended the episode)


class HermesAgentLoop:
    """Runs one conversation. `server` is a ManagedServer (phase 2) or anything with an OpenAI
    `chat_completion` (phase 1: ServerManager, OpenAIServer)."""

    def __init__(
        self,
        server: Any,
        tool_schemas: list[dict[str, Any]],
        valid_tool_names: set[str],
        max_turns: int = 30,
        task_id: str | None = None,
        temperature: float = 1.0,
        max_tokens: int | None = None,
        extra_body: dict[str, Any] | None = None,
        budget_config: BudgetConfig | None = None,
        *,
        tool_handler: ToolHandler | None = None,
        tokenizer: Any = None,
        max_context: int | None = None,
        tool_call_parser: str = "hermes",
        split: str = "train",
        demonstration: list[str] | None = None,
        text_action: TextAction | None = None,
    ) -> None:
        """Hermes' arguments first, in Hermes' order. Then: `tool_handler` (default: the tools of
        the sandbox of `task_id`, at most `tool_pool_size` at once), `tokenizer` (default: the
        managed server's), `max_context` (the token limit of the whole rollout; default
        `max_tokens`, as Hermes environments pass max_token_length there), `tool_call_parser`,
        `text_action` (each reply is that action, not parsed for calls)."""
        self.server = server
        self.text_action = text_action
        # An environment's expert turns, played instead of sampling (tools and reward stay real).
        self.demonstration = list(demonstration) if demonstration is not None else None
        self.tool_schemas = tool_schemas
        self.valid_tool_names = valid_tool_names
        self.task_id = task_id or uuid.uuid4().hex
        self.tool_handler = tool_handler or self._sandbox_tool
        tokenizer = tokenizer if tokenizer is not None else getattr(server, "tokenizer", None)
        self._scaffold = ChatScaffold(tokenizer, tool_schemas) if tokenizer is not None else None
        self.max_turns = max_turns
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_context = max_context or max_tokens or DEFAULT_MAX_CONTEXT
        self.parser = tool_call_parser
        self.extra_body = extra_body
        self.budget_config = budget_config or DEFAULT_BUDGET
        self.split = split

    @property
    def scaffold(self) -> ChatScaffold:
        if self._scaffold is None:
            raise ValueError("this loop needs a tokenizer: pass tokenizer= (or a managed server, which has one)")
        return self._scaffold

    async def _sandbox_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        async with task_sandboxes.settings.tool_slots:
            try:
                return await ToolContext(self.task_id).call(name, arguments)
            except Exception as exc:
                return tool_error(f"{name}: {type(exc).__name__}: {exc}")

    async def _persist(self, path: str, content: str) -> None:
        await (await task_sandboxes.get(self.task_id)).write_bytes(path, content.encode())

    @property
    def token_phase(self) -> bool:
        from atroposlib.envs.server_handling.managed_server import ManagedServer

        return self.demonstration is not None or isinstance(self.server, ManagedServer)

    async def run(self, messages: list[dict[str, Any]]) -> AgentResult:
        result = AgentResult(messages=list(messages))
        try:
            if self.token_phase:
                await self._run_tokens(result)
            else:
                await self._run_chat(result)
                result.trace = self._rebuild_trace(result.messages) if self._scaffold is not None else None
        except Exception as exc:
            logger.error("agent loop %s failed at turn %d: %s", self.task_id, result.turns_used, exc)
            result.stop_reason = "error"
        if not result.stop_reason:
            result.stop_reason = "max_turns"
        if self.token_phase and result.trace:
            result.managed_state = {"nodes": [self._sequence_node(result.trace)]}
        return result

    def _sequence_node(self, trace: TokenTrace) -> Any:
        """The rollout as atroposlib's managed server states it, where Hermes code reads its
        tokens (`result.managed_state["nodes"][-1]`)."""
        from atroposlib.envs.server_handling.managed_server import SequenceNode

        logprobs = trace.logprobs if trace.logprobs is not None else [PROMPT_LOGPROB] * len(trace)
        return SequenceNode(
            full_text=self.scaffold.tok.decode(trace.tokens),
            tokens=list(trace.tokens),
            masked_tokens=list(trace.masks),
            logprobs=list(logprobs),
        )

    # --- phase 2: tokens -----------------------------------------------------------------

    async def _run_tokens(self, result: AgentResult) -> None:
        trace = TokenTrace()
        trace.add_context(self.scaffold.prompt_tokens(result.messages))
        result.trace = trace
        template_history = list(result.messages)
        for turn in range(self.max_turns):
            budget = self.max_context - len(trace) - 1  # atroposlib drops sequences >= the limit
            if self.max_tokens:
                budget = min(budget, self.max_tokens)
            if turn == 0 and self.max_tokens and 1 <= budget < self.max_tokens:
                _warn_once(
                    "the prompt (%d tokens, tool schemas included) leaves %d of max_turn_tokens=%d under "
                    "max_token_length=%d: first replies are cut short; raise max_token_length",
                    len(trace),
                    budget,
                    self.max_tokens,
                    self.max_context,
                )
            if budget < 1:
                if turn == 0:
                    logger.warning(
                        "the prompt (%d tokens, tool schemas included) leaves no room under max_token_length=%d",
                        len(trace),
                        self.max_context,
                    )
                result.stop_reason = "context"
                return
            if self.demonstration is not None:
                if turn >= len(self.demonstration):
                    result.stop_reason = "answered"
                    return
                sampled, logprobs = self._demonstrated(self.demonstration[turn]), None
            else:
                _, outs, lps, _ = await self.server.server.tokens_and_logprobs_completion(
                    input_ids=list(trace.tokens),
                    n=1,
                    max_tokens=budget,
                    temperature=self.temperature,
                    split=self.split,
                )
                sampled, logprobs = [int(t) for t in outs[0]], [float(x) for x in lps[0]]
            trace.add_sampled(sampled, logprobs)
            result.turns_used = turn + 1
            text = self.scaffold.tok.decode(sampled, skip_special_tokens=True)
            result.reasoning_per_turn.append(None)
            template_history.append({"role": "assistant", "content": text})
            if self.text_action is not None:
                replies = await self._act(self.text_action, text, turn + 1, result)
            else:
                parsed = parse_tool_calls(text, self.parser)
                result.messages.append(_assistant(parsed.content, parsed.calls))
                if not parsed.calls and not parsed.errors:
                    result.finished_naturally, result.stop_reason = True, "answered"
                    return
                replies = await self._answer(parsed.calls, parsed.errors, turn + 1, result)
            result.messages += replies
            if turn + 1 == self.max_turns or result.stop_reason == "done":
                return  # the turn limit: no scaffolding for a turn that will never come
            scaffold = self.scaffold.continuation(template_history, replies, sampled)
            template_history += replies
            if len(trace) + len(scaffold) + 1 >= self.max_context:
                result.stop_reason = "context"
                return
            trace.add_context(scaffold)

    def _demonstrated(self, text: str) -> list[int]:
        """A demonstration turn as the tokens a model would sample: the text, then end of turn."""
        eos = self.scaffold.tok.eos_token_id
        return self.scaffold.encode(text) + ([int(eos)] if eos is not None else [])

    # --- phase 1: chat endpoint ------------------------------------------------------------

    async def _run_chat(self, result: AgentResult) -> None:
        kwargs: dict[str, Any] = {
            "n": 1,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens or self.max_context,
        }
        if self.tool_schemas:
            kwargs["tools"] = self.tool_schemas
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        for turn in range(self.max_turns):
            completion = await self.server.chat_completion(messages=result.messages, split=self.split, **kwargs)
            message = completion.choices[0].message
            result.turns_used = turn + 1
            result.reasoning_per_turn.append(getattr(message, "reasoning_content", None))
            if self.text_action is not None:
                result.messages += await self._act(self.text_action, message.content or "", turn + 1, result)
                if result.stop_reason == "done":
                    return
                continue
            native = [c.model_dump() for c in (message.tool_calls or [])]
            if native:
                content, calls, errors = message.content or "", [], []
                for entry in native:
                    call, error = _native_call(entry)
                    calls += [call] if call else []
                    errors += [error] if error else []
            else:  # a server without a tool parser: the calls are still in the text
                parsed = parse_tool_calls(message.content or "", self.parser)
                content, calls, errors = parsed.content, parsed.calls, parsed.errors
            result.messages.append(_assistant(content, calls))
            if not calls and not errors:
                result.finished_naturally, result.stop_reason = True, "answered"
                return
            result.messages += await self._answer(calls, errors, turn + 1, result)
            if result.stop_reason == "done":
                return

    def _rebuild_trace(self, messages: list[dict[str, Any]]) -> TokenTrace:
        """Phase 1 tokens from the transcript (no sampler logprobs: not for exact training)."""
        trace = TokenTrace(logprobs=None)
        first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
        trace.add_context(self.scaffold.prompt_tokens(messages[:first]))
        i = first
        while i < len(messages):
            reply = self.scaffold.template_messages([messages[i]])[-1]["content"]
            sampled = self.scaffold.encode(reply)
            trace.add_sampled(sampled, None)
            j = next((k for k in range(i + 1, len(messages)) if messages[k]["role"] == "assistant"), len(messages))
            if j < len(messages):
                trace.add_context(self.scaffold.continuation(messages[: i + 1], messages[i + 1 : j], sampled))
            i = j
        return trace

    # --- tools ---------------------------------------------------------------------------

    async def _answer(
        self, calls: list[ToolCall], errors: list[str], turn: int, result: AgentResult
    ) -> list[dict[str, Any]]:
        """One tool message per call (its result or error), one per unparsable call."""
        replies = []
        for call in calls:
            result.tool_calls += 1
            args = json.dumps(call.arguments, ensure_ascii=False)
            if call.name not in self.valid_tool_names:
                out = tool_error(
                    f"Unknown tool: {call.name!r}. Available tools: "
                    f"{', '.join(sorted(self.valid_tool_names)) or 'none'}"
                )
            else:
                out = await self.tool_handler(call.name, call.arguments)
            _record(out, ToolError(turn, call.name, args, out.content, out.content), result)
            replies.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": out.content})
        for error in errors:
            result.tool_calls += 1
            out = tool_error(f"malformed tool call: {error}")
            result.tool_errors.append(ToolError(turn, "", "", out.content, ""))
            replies.append({"role": "tool", "tool_call_id": "", "name": "", "content": out.content})
        return await apply_budget(replies, self.budget_config, self._persist, turn)

    async def _act(self, action: TextAction, text: str, turn: int, result: AgentResult) -> list[dict[str, Any]]:
        """A reply taken whole as the action: the assistant message records what was sent (`action`,
        shown by trajectory.py), and the tool's result comes back as the next user message."""
        arguments = {action.field: text}
        result.messages.append({"role": "assistant", "content": text, "action": arguments})
        result.tool_calls += 1
        out = await self.tool_handler(action.tool, arguments)
        args = json.dumps(arguments, ensure_ascii=False)
        _record(out, ToolError(turn, action.tool, args, out.content, out.content), result)
        return [{"role": "user", "content": out.content}]


def _record(out: ToolResult, error: ToolError, result: AgentResult) -> None:
    """What a tool's result tells the rollout: a failed call (`error`), an episode the tool ended."""
    if out.error:
        result.tool_errors.append(error)
    if out.ends_episode:
        result.stop_reason = "done"


def tool_error(message: str) -> ToolResult:
    """An error result in the tools' own format (a JSON object with `error`)."""
    return ToolResult(json.dumps({"error": message}, ensure_ascii=False), error=True)


def _assistant(content: str, calls: list[ToolCall]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = openai_tool_calls(calls)
    return message


def _native_call(entry: dict[str, Any]) -> tuple[ToolCall | None, str | None]:
    """An OpenAI tool_calls entry as a ToolCall, or why it is malformed."""
    fn = entry.get("function") or {}
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except ValueError as exc:
        return None, f"arguments of {fn.get('name')!r} are not JSON ({exc})"
    if not isinstance(args, dict):
        return None, f"arguments of {fn.get('name')!r} are not a JSON object"
    return ToolCall(name=fn.get("name") or "", arguments=args, id=entry.get("id") or ""), None
