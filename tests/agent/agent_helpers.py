"""Helpers shared by the agent tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
from tinker import types


class ScriptedSampler:
    """Replies with `script[turn]` (turn = assistant prompts in the request, minus one; the last
    entry repeats) and logprob -0.1 - 0.01*i for reply token i; records every prompt."""

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer
        self.script: list[str] = []
        self.prompts: list[list[int]] = []
        self.lock = threading.Lock()

    def reply_tokens(self, text: str) -> list[int]:
        return [*list(self.tok.encode(text, add_special_tokens=False)), self.tok.eos_token_id]

    async def sample_async(self, prompt: types.ModelInput, num_samples: int, params) -> types.SampleResponse:
        ids = prompt.to_ints()
        with self.lock:
            self.prompts.append(ids)
        turn = self.tok.decode(ids).count("<|im_start|>assistant") - 1
        tokens = self.reply_tokens(self.script[min(turn, len(self.script) - 1)])
        if params.max_tokens is not None:
            tokens = tokens[: params.max_tokens]
        lps = [-0.1 - 0.01 * i for i in range(len(tokens))]
        seq = types.SampledSequence(
            stop_reason="stop",
            sequence_id=f"s{turn}",
            tokens_np=np.asarray(tokens, np.int32),
            logprobs_np=np.asarray(lps, np.float32),
        )
        return types.SampleResponse(sequences=[seq] * num_samples)

    async def compute_logprobs_async(self, prompt: types.ModelInput) -> list[float | None]:
        return [None] + [-1.0] * (len(prompt.to_ints()) - 1)


def make_env(cls, url: str, tokenizer_path: Path, *, server_type: str = "sglang", **overrides):
    """`cls` from its config_init(), pointed at `url` and the given tokenizer; room for
    tiny-chat's byte-level tokens (one per character) and no demonstrations unless overridden."""
    config, servers = cls.config_init()
    servers[0].base_url = f"{url}/v1"
    servers[0].server_type = server_type
    servers[0].tokenizer_name = str(tokenizer_path)
    config.tokenizer_name = str(tokenizer_path)
    # sampled rollouts only, unless a test asks for the environment's demonstrations
    defaults = {"max_token_length": 4096, "max_turn_tokens": 200, "demonstrations_per_group": 0}
    for key, value in {**defaults, **overrides}.items():
        setattr(config, key, value)
    return cls(config, servers)


async def close_env(env) -> None:
    """Stop the health-check task and close the HTTP client in the loop that opened them."""
    for server in env.server.servers:
        if server.check_task is not None:
            server.check_task.cancel()
        await server.openai.close()
