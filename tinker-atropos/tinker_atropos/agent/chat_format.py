"""Chat-template rendering for tool-using conversations, shared by the agent loop and the local
inference server, so both put exactly the same text in front of the model.

- Templates that take `tools=` (Qwen, Hermes, Llama 3.1...) get the schemas natively.
- Templates that ignore them (tiny-chat, SmolLM2) get the Hermes function-calling system prompt
  (`<tools>` block, `<tool_call>` format) and `<tool_response>`-wrapped tool results instead.
- `continuation()` gives the scaffolding tokens that follow a sampled assistant turn (end of
  turn, tool results, next generation prompt): the template's own text, diffed, so a rollout's
  token sequence grows by pure appends (the prefix property the trainer relies on).
"""

from __future__ import annotations

import json
from typing import Any

from tinker_atropos.agent.tool_calls import ToolCall, format_tool_call

_MARK = "\x00agent-turn-mark\x00"
_PROBE = [{"role": "user", "content": "probe"}]
_PROBE_TOOL = [
    {
        "type": "function",
        "function": {"name": "probe_tool", "description": "probe", "parameters": {"type": "object", "properties": {}}},
    }
]

HERMES_TOOL_PROMPT = (
    "You are a function calling AI model. You are provided with function signatures within "
    "<tools></tools> XML tags. You may call one or more functions to assist with the user query. "
    "Don't make assumptions about what values to plug into functions. Here are the available "
    "tools: <tools>\n{tools}\n</tools>\nFor each function call return a json object with function "
    "name and arguments within <tool_call></tool_call> XML tags as follows:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-dict>}}\n</tool_call>'
)


class TemplateError(ValueError):
    """The tokenizer's chat template cannot extend a conversation by appending text."""


def openai_tool_calls(calls: list[ToolCall]) -> list[dict[str, Any]]:
    """ToolCalls as OpenAI `message.tool_calls` entries (arguments as a JSON string)."""
    return [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for c in calls
    ]


def text_of_parts(parts: list[Any]) -> str:
    """An OpenAI message content given as parts (`[{"type": "text", "text": ...}]`) as the text it holds;
    a part of another kind (an image) is a ValueError naming it."""
    texts = []
    for part in parts:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ValueError(f"content part {kind!r} is not supported (text parts only)")
        texts.append(part["text"])
    return "".join(texts)


def _calls_from_openai(entries: list[dict[str, Any]]) -> list[ToolCall]:
    calls = []
    for e in entries:
        fn = e.get("function") or {}
        args = fn.get("arguments") or {}
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                args = {"_raw": args}
        calls.append(ToolCall(name=fn.get("name", ""), arguments=args, id=e.get("id") or ""))
    return calls


class ChatScaffold:
    """Renders conversations with `tokenizer`'s chat template and the offered `tools`."""

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]] | None = None) -> None:
        self.tok = tokenizer
        self.tools = list(tools or []) or None
        self.native_tools = bool(self.tools) and self._template_takes_tools()

    def _template_takes_tools(self) -> bool:
        plain = self.tok.apply_chat_template(_PROBE, tokenize=False, add_generation_prompt=True)
        with_tools = self.tok.apply_chat_template(_PROBE, tools=_PROBE_TOOL, tokenize=False, add_generation_prompt=True)
        return "probe_tool" in with_tools and with_tools != plain

    def template_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What the template sees: OpenAI messages, tool calls/results as text when the
        template has no tool support, never a None content."""
        out: list[dict[str, Any]] = []
        for m in messages:
            m = {**m, "content": m.get("content") or ""}
            if not self.native_tools:
                if m["role"] == "assistant" and m.get("tool_calls"):
                    texts = [format_tool_call(c) for c in _calls_from_openai(m.pop("tool_calls"))]
                    m["content"] = "\n".join(t for t in [m["content"], *texts] if t)
                elif m["role"] == "tool" and self.tools:
                    m = {"role": "tool", "content": f"<tool_response>\n{m['content']}\n</tool_response>"}
            out.append(m)
        if self.tools and not self.native_tools:
            prompt = HERMES_TOOL_PROMPT.format(tools="\n".join(json.dumps(t) for t in self.tools))
            if out and out[0]["role"] == "system":
                out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}"}
            else:
                out.insert(0, {"role": "system", "content": prompt})
        return out

    def render(self, messages: list[dict[str, Any]], generation_prompt: bool = True) -> str:
        kwargs: dict[str, Any] = {"tools": self.tools} if self.native_tools else {}
        return self.tok.apply_chat_template(
            self.template_messages(messages), tokenize=False, add_generation_prompt=generation_prompt, **kwargs
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def prompt_tokens(self, messages: list[dict[str, Any]]) -> list[int]:
        """The first prompt: the conversation so far plus the assistant generation prompt."""
        return self.encode(self.render(messages, generation_prompt=True))

    def continuation(self, history: list[dict[str, Any]], new: list[dict[str, Any]], sampled: list[int]) -> list[int]:
        """Tokens to append after the sampled last turn of `history` (an assistant message):
        the rest of its end-of-turn text, the `new` messages, the next generation prompt.

        `sampled` are that turn's tokens: an end-of-turn token the model already sampled
        (e.g. `<|im_end|>`) is not added a second time.
        """
        if not history or history[-1]["role"] != "assistant":
            raise ValueError("continuation() follows an assistant turn")
        marked = [*history[:-1], {"role": "assistant", "content": _MARK}]
        before = self.render(marked, generation_prompt=False)
        after = self.render([*marked, *new], generation_prompt=True)
        if not after.startswith(before) or _MARK not in before:
            raise TemplateError(
                "the chat template re-renders earlier turns when messages are added, so a "
                "conversation cannot grow by appending tokens"
            )
        closing = before[before.rindex(_MARK) + len(_MARK) :]
        last = sampled[-1] if sampled else None
        tail = self.tok.decode([last]) if last in set(self.tok.all_special_ids) else ""
        if tail and closing.startswith(tail):
            closing = closing[len(tail) :]
        return self.encode(closing + after[len(before) :])
