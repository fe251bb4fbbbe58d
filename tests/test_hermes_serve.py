"""Hermes 0.19 on what a run trained (#86): rl_serve_model serves a run's adapter, its answer configures
Hermes word for word, and `hermes -z` is answered by that adapter, a tool call included.

The run: SmolLM2-135M-Instruct with a LoRA adapter trained here by the product's own supervised step
(`tinker_atropos.sft.steps.sft_step`: `cross_entropy` on the policy's tokens, the local backend) on one
demonstration of the conversation asserted below: the question, a `read_file` call, Hermes' result, the
answer. The demonstration is the conversation as the inference server renders Hermes' request, cut to its
last TAIL prompt tokens (the end of the tool schemas, the tool-call instructions, the question): a step on
the whole 2.8k-token prompt takes ~50 s on a 2-core CPU, on the tail ~2 s, and the adapter carries over
to the whole prompt (the server's log and Hermes' own requests below show it did).

What the test shows, from Hermes' own request dumps (HERMES_DUMP_REQUESTS) and the server's log:
  (a) both of Hermes' requests were served by the run's adapter (one log line each, whose prompt tokens
      are those of the dumped request rendered as the server renders it);
  (b) they ran at temperature 0 (the config's `extra_body`), the adapter's reply to the same conversation
      asked again at temperature 0 is Hermes' answer, and the base model's reply to Hermes' first request
      (greedy, sampled here) makes no tool call: the two differ;
  (c) the adapter's `<tool_call>` text became an OpenAI tool call, Hermes ran `read_file` in its working
      directory (a temp folder), its result came back in the next request, and the model answered in text.
Hermes runs with `-t file` where the answer's command says `-t terminal,file`: the same first prompt is
2.8k SmolLM2 tokens instead of 4.6k (measured: Hermes' run 23 s instead of 38 s).

Skipped only when `.runtimes/hermes` is absent (`make hermes` installs it).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml
from mcp import Client
from test_hermes import HERMES
from test_runs_mcp import call, environ, serving
from tinker import types

from rl_mcp.runs.store import RunRecord, RunStore
from tinker_atropos.agent.chat_format import ChatScaffold
from tinker_atropos.agent.loop import PROMPT_MASK
from tinker_atropos.agent.tool_calls import ToolCall, format_tool_call, parse_tool_calls
from tinker_atropos.agent.tool_schemas import TOOL_SCHEMAS
from tinker_atropos.agent.tools import select_tools
from tinker_atropos.backends.local import LocalTrainingClient, create_sampler, load_base_model
from tinker_atropos.run_files import RunFiles
from tinker_atropos.sft.examples import Example
from tinker_atropos.sft.steps import sft_step

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(not HERMES.exists(), reason="Hermes not installed: `make hermes` installs it"),
]

RUN_ID = "hermes-note"
BASE_MODEL = "smollm2-135m"
TOOLSETS = "file"  # Hermes' read_file, write_file, patch, search_files
NOTE_FILE, NOTE = "note.txt", "the secret word is plum"
PROMPT = f"What does {NOTE_FILE} say?"
ANSWER = f"{NOTE_FILE} says: {NOTE}"
TAIL, STEPS, LEARNING_RATE = 96, 4, 3e-3
MAX_REPLY_TOKENS = 96  # the run's cap on a turn (Hermes asks 65536): a wrong adapter fails in seconds
SERVED = "served by "


def hermes_tools() -> list[dict[str, Any]]:
    """The schemas Hermes 0.19 sends for TOOLSETS, in its order (by name): the product's verbatim copy."""
    names = select_tools(TOOLSETS.split(","), None)
    return sorted((TOOL_SCHEMAS[n] for n in names), key=lambda s: s["function"]["name"])


def read_result(content: str) -> str:
    """Hermes 0.19's read_file result for a one-line file (its JSON, lines numbered)."""
    return json.dumps(
        {
            "content": f"1|{content}\n2|",
            "total_lines": 1,
            "file_size": len(content) + 1,
            "truncated": False,
            "is_binary": False,
            "is_image": False,
        }
    )


def demonstration(tokenizer: Any) -> Example:
    """The conversation as the server renders it for Hermes (any system prompt: it lies before the tail),
    trained on the call and the answer, cut to the prompt's last TAIL tokens."""
    scaffold = ChatScaffold(tokenizer, hermes_tools())
    asked = [{"role": "system", "content": "(Hermes' system prompt)"}, {"role": "user", "content": PROMPT}]
    args = {"path": NOTE_FILE}
    openai_call = {"id": "call_0", "type": "function", "function": {"name": "read_file", "arguments": json.dumps(args)}}
    call_text = scaffold.encode(format_tool_call(ToolCall("read_file", args, "call_0")) + tokenizer.eos_token)
    called = {"role": "assistant", "content": "", "tool_calls": [openai_call]}
    result = {"role": "tool", "name": "read_file", "content": read_result(NOTE), "tool_call_id": "call_0"}
    prompt = scaffold.prompt_tokens(asked)
    between = scaffold.continuation([*asked, called], [result], call_text)
    answer = scaffold.encode(ANSWER + tokenizer.eos_token)
    tokens = [*prompt[-TAIL:], *call_text, *between, *answer]
    masks = [PROMPT_MASK] * TAIL + call_text + [PROMPT_MASK] * len(between) + answer
    return Example("demonstrations", "Hermes reads note.txt", tokens, masks, 1)


async def train_run(home: Path) -> str:
    """A completed local run whose step-STEPS adapter calls read_file and answers; its adapter's folder."""
    files = RunFiles(home / "runs" / RUN_ID)
    files.logs_dir.mkdir(parents=True)
    trainer = {
        "backend": "local", "base_model": BASE_MODEL, "total_steps": STEPS, "api_url": "http://127.0.0.1:1",
        "max_reply_tokens": MAX_REPLY_TOKENS,
    }  # fmt: skip
    files.config.write_text(yaml.safe_dump({"trainer": trainer}))
    base = load_base_model(BASE_MODEL, "cpu")
    client = LocalTrainingClient(base, rank=8, run_dir=files.run_dir, run_name=RUN_ID, seed=0)
    example = demonstration(base.tokenizer)
    for _ in range(STEPS):
        step = await sft_step(client, [example], types.AdamParams(learning_rate=LEARNING_RATE))
    assert step.loss is not None and step.loss < 0.1, step
    adapter = client.save_weights_for_sampler(f"step-{STEPS:06d}")
    store = RunStore(home / "runs.sqlite")
    store.insert(
        RunRecord(
            run_id=RUN_ID, environment="hermes", profile="local", status="completed",
            run_dir=str(files.run_dir), config_path=str(files.config), run_name=RUN_ID,
            total_steps=STEPS, api_port=1, inference_port=2, created_at=time.time(), ended_at=time.time(),
        )
    )  # fmt: skip
    store.close()
    return adapter


async def serve_run(stack: AsyncExitStack, home: Path) -> dict[str, Any]:
    """rl_serve_model(run_id)'s answer through an MCP client; the model stopped when `stack` closes."""
    _, server = await stack.enter_async_context(serving(environ(home)))
    client = await stack.enter_async_context(Client(server))
    answer = await call(client, "rl_serve_model", run_id=RUN_ID)
    stack.push_async_callback(call, client, "rl_stop_served_model", model=answer["model"])
    return answer


async def run_hermes(answer: dict[str, Any], cwd: Path) -> anyio.abc.Process:
    """The answer's command line as it is, but its prompt (PROMPT) and toolsets (TOOLSETS), in `cwd`."""
    words = shlex.split(answer["hermes"]["command"])
    assignments = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    argv = [w for w in words if w.split("=", 1)[0] not in assignments]
    assert argv[0] == "hermes" and argv.count("-z") == 1 and argv.count("-t") == 1, words
    argv[0] = str(HERMES)
    argv[argv.index("-z") + 1] = PROMPT
    argv[argv.index("-t") + 1] = TOOLSETS
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(assignments, PYTHONPATH="", NO_COLOR="1")
    env["HERMES_DUMP_REQUESTS"] = "1"  # each request's body in $HERMES_HOME/sessions/request_dump_*.json
    return await anyio.run_process(argv, cwd=cwd, env=env, check=False)


def dumped_requests(home: Path) -> list[dict[str, Any]]:
    """Hermes' request bodies, in the order sent (their file names carry the time)."""
    return [json.loads(p.read_text())["request"]["body"] for p in sorted(home.glob("sessions/request_dump_*.json"))]


def served_lines(log: Path) -> list[tuple[int, str]]:
    """The server's log lines for chat requests: their prompt tokens and the weights that served them."""
    out = []
    for line in log.read_text().splitlines():
        if "chat completion" in line and SERVED in line:
            prompt = int(line.split(": ")[-1].split(" prompt")[0])
            out.append((prompt, line.split(SERVED, 1)[1]))
    return out


async def greedy(sampler: Any, prompt: list[int], max_tokens: int) -> list[int]:
    params = types.SamplingParams(max_tokens=max_tokens, temperature=0.0)
    reply = await sampler.sample_async(types.ModelInput.from_ints(prompt), 1, params)
    return list(reply.sequences[0].tokens)


async def test_hermes_answers_through_the_adapter_rl_serve_model_serves(rl_home: Path, tmp_path: Path) -> None:
    adapter = await train_run(rl_home)
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / NOTE_FILE).write_text(NOTE + "\n")
    async with AsyncExitStack() as stack:
        answer = await serve_run(stack, rl_home)
        assert answer["model"] == f"{RUN_ID}@step-{STEPS:06d}" and Path(answer["weights"]) == Path(adapter)
        home = Path(answer["hermes"]["home"])
        assert (home / "config.yaml").read_text() == answer["hermes"]["config_yaml"]  # word for word
        assert yaml.safe_load(answer["hermes"]["config_yaml"]) == answer["hermes"]["config"]

        hermes = await run_hermes(answer, cwd)
        out, err = hermes.stdout.decode(), hermes.stderr.decode()
        assert hermes.returncode == 0 and out.strip() == ANSWER, (out, err[-2000:])

        # (c) what Hermes sent: the question, then the call it ran in cwd and its result
        first, second = requests = dumped_requests(home)
        system, question = first["messages"]
        assert (system["role"], question) == ("system", {"role": "user", "content": PROMPT})
        assert f"Current working directory: {cwd}\n" in system["content"]
        assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
        call_sent, result = second["messages"][2:]
        (made,) = call_sent["tool_calls"]
        assert made["function"]["name"] == "read_file"
        assert json.loads(made["function"]["arguments"]) == {"path": NOTE_FILE}
        assert result["tool_call_id"] == made["id"] and json.loads(result["content"])["content"] == f"1|{NOTE}\n2|"
        for body in requests:
            assert body["model"] == answer["model"] and body["tools"] == hermes_tools()

        # (a) both requests served by the run's adapter, each log line that request's prompt
        base = load_base_model(BASE_MODEL, "cpu")
        prompts = [ChatScaffold(base.tokenizer, b["tools"]).prompt_tokens(b["messages"]) for b in requests]
        assert served_lines(Path(answer["log"])) == [(len(p), str(adapter)) for p in prompts]

        # (b) temperature 0; the adapter's reply to the same conversation at temperature 0 is Hermes' answer
        assert all(b["extra_body"]["temperature"] == 0 for b in requests), [b.get("extra_body") for b in requests]
        async with httpx.AsyncClient(timeout=120) as http:
            again = await http.post(
                f"{answer['url']}/chat/completions",
                json={**second, "temperature": 0, "max_tokens": 32, "stream": False},
            )
        assert again.status_code == 200 and again.json()["choices"][0]["message"]["content"] == ANSWER, again.text
    # ... and the base model's reply to Hermes' first request, greedy, is no tool call: the two differ
    base_reply = base.tokenizer.decode(await greedy(create_sampler(base), prompts[0], 24), skip_special_tokens=True)
    assert not parse_tool_calls(base_reply).calls and "<tool_call>" not in base_reply, base_reply
