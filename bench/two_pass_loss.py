"""What a loss costs on a Tinker-API service when the service has no built-in of its math: two passes
(tinker_atropos/losses/on_tinker.py: a forward, then importance_sampling at ratio 1 with the loss's
gradient) against the service's own importance_sampling, on SkyRL's engine (JAX on this CPU).

The server of the `skyrl` profile (its model: tiny-chat, or --model) starts the engine; one training
client then sends the same batch (8 replies of 48 tokens after a chat prompt) alternately: the
built-in importance_sampling, and dro as two passes, each followed by an optimizer step at learning
rate 0 (the weights stay). The first of each is XLA's compile and left out.

    .venv/bin/python bench/two_pass_loss.py [--model tiny-chat] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
REPLIES, REPLY_TOKENS = 8, 48


def batch(model: str) -> list[Any]:
    from tinker import types
    from transformers import AutoTokenizer

    from tinker_atropos.models.paths import model_dir

    tokenizer = AutoTokenizer.from_pretrained(model_dir(model))
    chat = [{"role": "user", "content": "What is 12 + 7? Say it in words."}]
    prompt = list(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)["input_ids"])
    rng = np.random.default_rng(0)
    data = []
    for i in range(REPLIES):
        ids = prompt + [int(t) for t in rng.integers(3, 200, REPLY_TOKENS)]
        reply = np.arange(len(ids) - 1) >= len(prompt) - 1
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(ids[:-1]),
                loss_fn_inputs={
                    "target_tokens": np.array(ids[1:]),
                    "logprobs": np.where(reply, -2.0, 0.0).astype(np.float32),
                    "advantages": np.where(reply, 1.0 if i % 2 else -1.0, 0.0).astype(np.float32),
                },
            )
        )
    return data


async def timed(url: str, model: str, rounds: int) -> dict[str, list[float]]:
    import tinker
    from tinker import types

    from tinker_atropos.backends.tinker_compat import allow_missing_sequence_ids, unload_model
    from tinker_atropos.losses import LOSSES
    from tinker_atropos.losses.on_tinker import forward_backward

    allow_missing_sequence_ids()
    service = tinker.ServiceClient(base_url=url, api_key="tml-self-hosted")
    create = service.create_lora_training_client
    training = await asyncio.to_thread(lambda: create(base_model=model, rank=16, seed=0).result())
    frozen = types.AdamParams(learning_rate=0.0)
    data, times = batch(model), {"built-in importance_sampling": [], "dro as two passes": []}
    dro = LOSSES["dro"].config({"beta": 0.05})
    try:
        for _ in range(rounds + 1):
            for name, (loss, config) in zip(times, (("importance_sampling", None), ("dro", dro))):
                started = time.perf_counter()
                await forward_backward(training, data, loss, config, self_hosted=True)
                await training.optim_step(frozen)
                times[name].append(time.perf_counter() - started)
    finally:
        unload_model(url, training.model_id, 30.0)
    return {name: values[1:] for name, values in times.items()}  # the first: compiles


async def main_async(model: str, rounds: int) -> int:
    from rl_mcp.app import open_app
    from rl_mcp.settings import PROFILES_DIR, Settings

    with tempfile.TemporaryDirectory(prefix="rl-mcp-bench-") as tmp:
        shipped = yaml.safe_load((PROFILES_DIR / "skyrl.yaml").read_text())
        profile = Path(tmp) / "skyrl.yaml"
        profile.write_text(yaml.safe_dump({**shipped, "model": model}))
        env = {**os.environ, "RL_MCP_HOME": str(Path(tmp) / "home"), "RL_MCP_PROFILE": str(profile)}
        env.setdefault("RL_MCP_RUNTIMES", str(ROOT / ".runtimes"))
        async with open_app(Settings.from_env(env)) as app:
            assert app.engine is not None, "the skyrl profile starts an engine"
            async with app.engine.hold() as url:
                times = await timed(url, model, rounds)
    base = statistics.median(times["built-in importance_sampling"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:>30}: median {median:.3f} s over {len(values)} steps ({median / base:.2f}x the built-in)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny-chat")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    return asyncio.run(main_async(a.model, a.rounds))


if __name__ == "__main__":
    raise SystemExit(main())
