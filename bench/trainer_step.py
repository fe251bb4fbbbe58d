"""Trainer step benchmark, measured side by side in one run (medians, runs interleaved).

1. One local RL step on tiny-chat (sample 32 completions of 20 tokens, forward_backward with
   importance_sampling, optim_step) through the backend, against a bare torch loop doing the
   same math on the same model. Target: backend / bare <= 1.25.
2. `groups_to_datums` on 128 sequences x 2048 tokens. Target: <= 0.2 s.
3. On SmolLM2-135M-Instruct (when `make smollm2` has installed it): one forward_backward on an
   arithmetic batch (2 groups x 8 replies of 16 tokens), each group's prompt run once with its
   KV cache under the replies, against every row run whole (before that change).
4. On SmolLM2: an agent-shaped batch's forward_backward with the fused output head
   (backends/local/target_logprobs.py) against the model's logits and cross_entropy.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from peft import get_peft_model
from tinker import types

from tinker_atropos.backends.local import LocalTrainingClient, create_sampler, load_base_model
from tinker_atropos.backends.local.training import lora_config

N_SAMPLES, MAX_TOKENS, RANK, LR, REPEATS = 32, 20, 8, 1e-3, int(os.environ.get("BENCH_REPEATS", 7))
PROMPT = [{"role": "user", "content": "Repeat the letter a five times."}]


def _reward(tokens: np.ndarray) -> float:
    return float((tokens == ord("a")).mean())


def _advantages(rewards: list[float]) -> np.ndarray:
    r = np.asarray(rewards, dtype=np.float32)
    return r - r.mean()


class BackendStep:
    def __init__(self, base, prompt: list[int], run_dir: str) -> None:
        self.client = LocalTrainingClient(base, RANK, run_dir, "bench", seed=0)
        self.sampler = create_sampler(base)
        self.prompt = prompt

    def __call__(self, seed: int) -> None:
        n = len(self.prompt)
        res = self.sampler.sample(
            types.ModelInput.from_ints(self.prompt),
            N_SAMPLES,
            types.SamplingParams(max_tokens=MAX_TOKENS, seed=seed, stop=[]),
        )
        adv = _advantages([_reward(s.tokens_np) for s in res.sequences])
        data = []
        for s, a in zip(res.sequences, adv):
            toks = np.concatenate([self.prompt, s.tokens_np]).astype(np.int64)
            m = len(s.tokens_np)
            data.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(toks[:-1].tolist()),
                    loss_fn_inputs={
                        "target_tokens": toks[1:],
                        "logprobs": np.concatenate([np.zeros(n - 1, np.float32), s.logprobs_np]),
                        "advantages": np.concatenate([np.zeros(n - 1, np.float32), np.full(m, a, np.float32)]),
                    },
                )
            )
        self.client.forward_backward(data, "importance_sampling")
        self.client.optim_step(types.AdamParams(learning_rate=LR, grad_clip_norm=1.0))


class BareStep:
    """The same math with nothing around it: a hand-written KV-cache sampler, one padded batch."""

    def __init__(self, base, prompt: list[int]) -> None:
        torch.manual_seed(0)
        self.model = get_peft_model(base.copy_model(), lora_config(RANK)).eval()
        self.sampler = base.copy_model().eval()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=LR, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0)
        self.prompt = torch.tensor([prompt])

    @torch.no_grad()
    def sample(self, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        out = self.sampler(input_ids=self.prompt, use_cache=True)
        cache = out.past_key_values
        cache.batch_repeat_interleave(N_SAMPLES)
        logits = out.logits[:, -1].expand(N_SAMPLES, -1)
        toks, lps = [], []
        for t in range(MAX_TOKENS):
            logp = logits.log_softmax(-1)
            nxt = torch.multinomial(logp.exp(), 1, generator=gen)
            toks.append(nxt[:, 0])
            lps.append(logp.gather(-1, nxt)[:, 0])
            if t + 1 < MAX_TOKENS:
                logits = self.sampler(input_ids=nxt, past_key_values=cache, use_cache=True).logits[:, -1]
        return torch.stack(toks, 1), torch.stack(lps, 1)

    def __call__(self, seed: int) -> None:
        toks, lps = self.sample(seed)
        n = self.prompt.shape[1]
        rewards = (toks == ord("a")).float().mean(1)
        adv = (rewards - rewards.mean())[:, None]
        seqs = torch.cat([self.prompt.expand(N_SAMPLES, -1), toks], 1)
        logits = self.model(input_ids=seqs[:, :-1]).logits[:, n - 1 :]
        lp = -torch.nn.functional.cross_entropy(logits.transpose(1, 2), toks, reduction="none")
        loss = -(torch.exp(lp - lps) * adv).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def bench_step() -> None:
    import tempfile

    base = load_base_model("tiny-chat", "cpu")
    prompt = base.tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True)["input_ids"]
    with tempfile.TemporaryDirectory() as run_dir:
        steps = {"backend": BackendStep(base, prompt, run_dir), "bare torch": BareStep(base, prompt)}
        times: dict[str, list[float]] = {k: [] for k in steps}
        for i in range(REPEATS + 1):  # the first round warms up both
            for name, step in steps.items():
                start = time.perf_counter()
                step(seed=i)
                if i:
                    times[name].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["backend"] / med["bare torch"]
    print(
        f"local step, tiny-chat, {torch.get_num_threads()} threads (sample {N_SAMPLES}x{MAX_TOKENS} tokens "
        f"+ forward_backward + optim_step), median of {REPEATS}:"
    )
    print(
        f"  backend {med['backend']:.3f} s   bare torch {med['bare torch']:.3f} s   "
        f"ratio {ratio:.2f}x (target <= 1.25x) {'OK' if ratio <= 1.25 else 'OVER'}"
    )


def _groups(n_groups: int = 16, group_size: int = 8, length: int = 2048, prompt: int = 512) -> list[dict]:
    rng = np.random.default_rng(0)
    groups = []
    for _ in range(n_groups):
        tokens = rng.integers(0, 32000, size=(group_size, length))
        masks = tokens.copy()
        masks[:, :prompt] = -100
        logprobs = np.where(masks == -100, 1.0, -rng.random((group_size, length)))
        groups.append(
            {
                "tokens": tokens.tolist(),
                "masks": masks.tolist(),
                "inference_logprobs": logprobs.tolist(),
                "scores": rng.random(group_size).tolist(),
                "overrides": None,
                "group_overrides": None,
            }
        )
    return groups


def bench_conversion() -> None:
    try:
        from tinker_atropos.trainer.batches import groups_to_datums
    except ImportError as exc:
        print(f"batch conversion: tinker_atropos.trainer.batches.groups_to_datums unavailable ({exc})")
        return
    groups = _groups()
    times = []
    for _ in range(4):
        start = time.perf_counter()
        conv = groups_to_datums(groups)
        times.append(time.perf_counter() - start)
    assert len(conv.datums) == 128 and conv.datums[0].model_input.length == 2047
    t = statistics.median(times[1:])
    print(
        f"batch conversion, 128 sequences x 2048 tokens, median of 3: {t:.3f} s "
        f"(target <= 0.2 s) {'OK' if t <= 0.2 else 'OVER'}"
    )


def bench_shared_prompt(groups: int = 2, group_size: int = 8, reply_tokens: int = 16) -> None:
    import tempfile

    from tinker_atropos.backends.local import microbatches
    from tinker_atropos.environments.arithmetic_data import question, split

    try:
        base = load_base_model("smollm2-135m", "cpu")
    except Exception as exc:  # the model's wheel is optional (make smollm2)
        print(f"shared prompt: smollm2-135m unavailable ({exc})")
        return
    gen = torch.Generator().manual_seed(0)
    train, _ = split(level=2, eval_size=64, eval_seed=1234, num_train=groups, seed=0)
    data = []
    for text, _answer in train:
        chat = [{"role": "user", "content": question(text)}]
        prompt = base.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)["input_ids"]
        for _ in range(group_size):
            reply = torch.randint(0, 1000, (reply_tokens,), generator=gen).tolist()
            toks, n = prompt + reply, len(prompt)
            adv = torch.zeros(len(toks) - 1)
            adv[n - 1 :] = torch.randn(reply_tokens, generator=gen)
            data.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(toks[:-1]),
                    loss_fn_inputs={"target_tokens": torch.tensor(toks[1:]), "logprobs": -adv.abs(), "advantages": adv},
                )
            )
    shared_min = microbatches.MIN_SHARED_PREFIX
    times: dict[str, list[float]] = {"shared prompt": [], "each row whole": []}
    with tempfile.TemporaryDirectory() as run_dir:
        client = LocalTrainingClient(base, RANK, run_dir, "bench", seed=0)
        for i in range(4):  # the first round warms up
            for name, min_prefix in (("shared prompt", shared_min), ("each row whole", 1 << 30)):
                microbatches.MIN_SHARED_PREFIX = min_prefix
                start = time.perf_counter()
                client.forward_backward(data, "importance_sampling")
                if i:
                    times[name].append(time.perf_counter() - start)
                client.optimizer.zero_grad(set_to_none=True)
    microbatches.MIN_SHARED_PREFIX = shared_min
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"forward_backward, smollm2-135m, {groups} groups x {group_size} replies "
        f"({len(prompt)} prompt + {reply_tokens} reply tokens), median of 3: shared prompt "
        f"{med['shared prompt']:.2f} s, each row whole {med['each row whole']:.2f} s "
        f"({med['each row whole'] / med['shared prompt']:.1f}x faster)"
    )


def bench_fused_head(groups: int = 2, group_size: int = 8, prompt_tokens: int = 249) -> None:
    """An agent-shaped batch (tool_calculator's 249-token prompt; replies of 40-140 tokens whose
    15-token tool result is not trained): the fused head against the model's logits and
    cross_entropy, in float32, the same client, rounds interleaved."""
    import tempfile

    try:
        base = load_base_model("smollm2-135m", "cpu")
    except Exception as exc:  # the model's wheel is optional (make smollm2)
        print(f"fused head: smollm2-135m unavailable ({exc})")
        return
    rng, vocab = np.random.default_rng(0), base.model.config.vocab_size
    data = []
    for _ in range(groups):
        prompt = rng.integers(10, vocab, prompt_tokens).tolist()
        for adv in rng.normal(size=group_size):
            toks = prompt + rng.integers(10, vocab, int(rng.integers(40, 140))).tolist()
            trained = np.zeros(len(toks) - 1, np.float32)
            trained[prompt_tokens - 1 : prompt_tokens + 39] = 1.0  # the first turn
            trained[prompt_tokens + 54 :] = 1.0  # the turn after the tool's result
            data.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(toks[:-1]),
                    loss_fn_inputs={
                        "target_tokens": np.asarray(toks[1:], np.int64),
                        "logprobs": np.full(len(toks) - 1, -2.0, np.float32),
                        "advantages": trained * np.float32(adv),
                    },
                )
            )
    times: dict[str, list[float]] = {"fused head": [], "logits + cross_entropy": []}
    with tempfile.TemporaryDirectory() as run_dir:
        client = LocalTrainingClient(base, RANK, run_dir, "bench", seed=0)
        fused = client._fused
        for i in range(3):  # the first round warms up
            for name in times:
                client._fused = fused if name == "fused head" else None
                start = time.perf_counter()
                client.forward_backward(data, "ppo")
                if i:
                    times[name].append(time.perf_counter() - start)
                client.optimizer.zero_grad(set_to_none=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    tokens = sum(d.model_input.length for d in data)
    print(
        f"forward_backward, smollm2-135m, agent-shaped batch ({groups} groups x {group_size}, {tokens} tokens), "
        f"median of 2: fused head {med['fused head']:.2f} s, logits + cross_entropy "
        f"{med['logits + cross_entropy']:.2f} s ({med['logits + cross_entropy'] / med['fused head']:.2f}x)"
    )


if __name__ == "__main__":
    bench_step()
    bench_conversion()
    bench_shared_prompt()
    bench_fused_head()
    sys.exit(0)
