"""The local torch+peft backend against direct torch computations on the same model."""

from __future__ import annotations

import asyncio
import json
import math
import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from numerics import U, grad_rel, logprob_tol, loss_tol, sum_tol
from tinker import types

from tinker_atropos.backends.factory import BackendUnavailable, create_base_sampler, create_training_backend
from tinker_atropos.backends.local import LocalTrainingClient, create_sampler, load_base_model
from tinker_atropos.trainer.config import parse_run_config

pytestmark = pytest.mark.kernels

PROMPT = "<|im_start|>user\nRepeat the letter b.<|im_end|>\n<|im_start|>assistant\n"


def _cfg(run_dir: Path, **tinker: object):
    base = {
        "total_steps": 2,
        "api_url": "http://127.0.0.1:1",
        "inference_port": 2,
        "run_dir": str(run_dir),
        "run_name": "t",
        "lora_rank": 4,
        "device": "cpu",
    }
    return parse_run_config({"trainer": {**base, **tinker}})


@pytest.fixture(scope="module")
def base():
    return load_base_model("tiny-chat", "cpu")


@pytest.fixture()
def client(base, tmp_path: Path) -> LocalTrainingClient:
    c = LocalTrainingClient(base, rank=4, run_dir=tmp_path, run_name="t", seed=0)
    _nudge(c)  # LoRA B starts at zero, which makes every A-gradient zero: move off it first
    return c


def _nudge(c: LocalTrainingClient) -> None:
    torch.manual_seed(123)
    with torch.no_grad():
        for p in c.params:
            p.add_(torch.randn_like(p) * 0.05)


def _rl_datum(tokens: list[int], n_prompt: int, gen: torch.Generator) -> types.Datum:
    n = len(tokens) - 1
    adv = torch.randn(n, generator=gen)
    adv[: n_prompt - 1] = 0.0
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": torch.tensor(tokens[1:]),
            "logprobs": -5.5 + torch.randn(n, generator=gen) * 0.3,
            "advantages": adv,
        },
    )


def _batch(base, k: int = 5, seed: int = 0) -> list[types.Datum]:
    gen = torch.Generator().manual_seed(seed)
    prompt = base.tokenizer.encode(PROMPT)
    data = []
    for i in range(k):
        completion = torch.randint(0, 256, (3 + 2 * i,), generator=gen).tolist()  # ragged lengths
        data.append(_rl_datum(prompt + completion, len(prompt), gen))
    return data


def _direct_logprobs(model, datum: types.Datum) -> torch.Tensor:
    ids = torch.tensor([datum.model_input.to_ints()])
    logits = model(input_ids=ids).logits[0]
    return torch.log_softmax(logits, -1).gather(-1, datum.loss_fn_inputs["target_tokens"].to_torch()[:, None])[:, 0]


def _grads(c: LocalTrainingClient) -> list[torch.Tensor]:
    return [p.grad.clone() for p in c.params]


def _lp_tol(model, data: list[types.Datum]) -> float:
    """Logprobs of `data` from two batch shapes or kernels (numerics.logprob_tol), at their size."""
    longest = max(d.model_input.length for d in data)
    magnitude = max(float(d.loss_fn_inputs["logprobs"].to_torch().abs().max()) for d in data) + 1.0
    return logprob_tol(model.config, longest, magnitude)


def _grad_rel(model, data: list[types.Datum]) -> float:
    """A batch's gradient from two orders of summation (numerics.grad_rel)."""
    return grad_rel(model.config, max(d.model_input.length for d in data), sum(d.model_input.length for d in data))


def test_importance_sampling_loss_and_gradient_match_direct_torch(client, base) -> None:
    data = _batch(base)
    out = client.forward_backward(data, "importance_sampling")
    got = _grads(client)
    client.optimizer.zero_grad(set_to_none=True)

    total, terms = torch.zeros(()), []
    lp_tol = _lp_tol(client.model, data)  # a padded batch against one datum at a time
    for d, o in zip(data, out.loss_fn_outputs):
        lp = _direct_logprobs(client.model, d)
        ratio = torch.exp(lp - d.loss_fn_inputs["logprobs"].to_torch())
        total = total - (ratio * d.loss_fn_inputs["advantages"].to_torch()).sum()
        terms += (ratio * d.loss_fn_inputs["advantages"].to_torch()).tolist()
        torch.testing.assert_close(o["logprobs"].to_torch(), lp.detach(), rtol=0, atol=lp_tol)
    want = torch.autograd.grad(total, client.params)
    assert out.metrics["loss:sum"] == pytest.approx(total.item(), abs=loss_tol(terms, lp_tol))
    assert any(g.abs().sum() > 0 for g in got)
    got_flat, want_flat = torch.cat([g.flatten() for g in got]), torch.cat([w.flatten() for w in want])
    gap = (got_flat - want_flat).norm() / want_flat.norm()
    assert gap <= _grad_rel(client.model, data), gap


def test_ppo_clips_the_ratio(client, base) -> None:
    data = _batch(base, k=2)
    # Sampler logprobs far below the trainer's: ratio >> 1.2; positive advantages get clipped.
    lp = [_direct_logprobs(client.model, d).detach() for d in data]
    clipped = [
        types.Datum(
            model_input=d.model_input,
            loss_fn_inputs={
                "target_tokens": d.loss_fn_inputs["target_tokens"],
                "logprobs": x - 1.0,
                "advantages": torch.ones_like(x),
            },
        )
        for d, x in zip(data, lp)
    ]
    out = client.forward_backward(clipped, "ppo")
    for o in out.loss_fn_outputs:  # the clipped value -1.2 * A (A = 1): a constant, one rounding
        torch.testing.assert_close(
            o["elementwise_loss"].to_torch(), torch.full_like(o["logprobs"].to_torch(), -1.2), rtol=2 * U, atol=0
        )
    assert all(p.grad is None or p.grad.abs().max() == 0 for p in client.params)  # clipped: no gradient
    # Negative advantages are not clipped from above: loss is -ratio * A.
    client.optimizer.zero_grad(set_to_none=True)
    unclipped = [
        types.Datum(model_input=d.model_input, loss_fn_inputs={**d.loss_fn_inputs, "advantages": -torch.ones_like(x)})
        for d, x in zip(clipped, lp)
    ]
    out = client.forward_backward(unclipped, "ppo")
    ratio = torch.exp(torch.tensor(1.0))
    lp_tol = _lp_tol(client.model, clipped)  # e^(1 + lp gap): the ratio moves by e * lp_tol at most
    for o in out.loss_fn_outputs:
        torch.testing.assert_close(
            o["elementwise_loss"].to_torch(),
            torch.full_like(o["logprobs"].to_torch(), ratio.item()),
            rtol=0,
            atol=ratio.item() * lp_tol * math.exp(lp_tol),
        )
    assert any(p.grad.abs().max() > 0 for p in client.params)


def test_cross_entropy_honours_weights_and_learns(client, base) -> None:
    tokens = base.tokenizer.encode(PROMPT + "bbbbbbbb<|im_end|>")
    n_prompt = len(base.tokenizer.encode(PROMPT))
    weights = torch.zeros(len(tokens) - 1)
    weights[n_prompt - 1 :] = 1.0
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": torch.tensor(tokens[1:]), "weights": weights},
    )
    losses = []
    for _ in range(15):
        out = client.forward_backward([datum], "cross_entropy")
        lp = out.loss_fn_outputs[0]["logprobs"].to_torch()
        # the same logprobs summed in another order; the same products, one rounding each
        assert out.metrics["loss:sum"] == pytest.approx(-(lp * weights).sum().item(), abs=sum_tol(lp * weights))
        torch.testing.assert_close(
            out.loss_fn_outputs[0]["elementwise_loss"].to_torch(), -lp * weights, rtol=2 * U, atol=0
        )
        losses.append(out.metrics["loss:sum"])
        client.optim_step(types.AdamParams(learning_rate=1e-2))
    assert losses[-1] < 0.5 * losses[0]


def test_gradients_accumulate_until_optim_step(client, base) -> None:
    data = _batch(base, k=4, seed=1)
    client.forward_backward(data[:2], "importance_sampling")
    client.forward_backward(data[2:], "importance_sampling")
    two_calls = _grads(client)
    client.optimizer.zero_grad(set_to_none=True)
    client.forward_backward(data, "importance_sampling")
    a, b = torch.cat([g.flatten() for g in two_calls]), torch.cat([g.flatten() for g in _grads(client)])
    assert (a - b).norm() <= _grad_rel(client.model, data) * b.norm()  # two batch shapes, two sum orders
    before = [p.detach().clone() for p in client.params]
    metrics = client.optim_step(types.AdamParams(learning_rate=1e-3, grad_clip_norm=0.5)).metrics
    assert metrics["grad_norm"] > 0
    # each step's rate is the one its AdamParams carry (a schedule's value: trainer/lr_schedule.py)
    assert metrics["learning_rate"] == 1e-3 and {g["lr"] for g in client.optimizer.param_groups} == {1e-3}
    assert all(p.grad is None for p in client.params)
    assert any(not torch.equal(a, p) for a, p in zip(before, client.params))


@pytest.mark.parametrize(
    "cut",
    [
        {"MICROBATCH_TOKENS": 10},  # one reply per forward pass, the prompt run once for them all
        {"MIN_SHARED_PREFIX": 10_000},  # every row run whole: no shared prompt
    ],
)
def test_shared_prompt_and_microbatches_give_the_whole_batch_numbers(client, base, monkeypatch, cut) -> None:
    from tinker_atropos.backends.local import microbatches

    data = _batch(base, k=6, seed=3)
    tokens = [d.model_input.to_ints() for d in data]
    trained = [microbatches.first_trained(d.loss_fn_inputs["advantages"].tolist()) for d in data]
    (shared,) = microbatches.plan(tokens, trained, client.model.config.vocab_size)
    assert shared.prefix == len(base.tokenizer.encode(PROMPT)) - 1 and sorted(
        r for p in shared.passes for r in p
    ) == list(range(6))
    whole = client.forward_backward(data, "importance_sampling")
    want = torch.cat([p.grad.flatten() for p in client.params])
    client.optimizer.zero_grad(set_to_none=True)
    for name, value in cut.items():
        monkeypatch.setattr(microbatches, name, value)
    cut_plan = microbatches.plan(tokens, trained, client.model.config.vocab_size)
    assert cut_plan != [shared]
    if "MICROBATCH_TOKENS" in cut:
        assert len(cut_plan) == 1 and len(cut_plan[0].passes) > 1 and cut_plan[0].prefix == shared.prefix
    split = client.forward_backward(data, "importance_sampling")
    got = torch.cat([p.grad.flatten() for p in client.params])
    # other passes, other padding: each sum in another order (numerics.py)
    gap = (got - want).norm() / want.norm()
    assert gap <= _grad_rel(client.model, data), gap
    lp_tol = _lp_tol(client.model, data)
    terms = [
        r * a
        for o, d in zip(whole.loss_fn_outputs, data)
        for r, a in zip(
            torch.exp(o["logprobs"].to_torch() - d.loss_fn_inputs["logprobs"].to_torch()).tolist(),
            d.loss_fn_inputs["advantages"].tolist(),
        )
    ]
    assert split.metrics["loss:sum"] == pytest.approx(whole.metrics["loss:sum"], abs=loss_tol(terms, lp_tol))
    for a, b in zip(split.loss_fn_outputs, whole.loss_fn_outputs):  # outputs stay in datum order
        torch.testing.assert_close(a["logprobs"].to_torch(), b["logprobs"].to_torch(), rtol=0, atol=lp_tol)


def test_rows_that_only_begin_alike_share_that_beginning_with_the_whole_rows_numbers(client, base, monkeypatch) -> None:
    """A supervised batch: one system prompt, then each example's own task (untrained), then its
    reply. The common beginning runs once; the gradients and logprobs are those of every row run whole."""
    from tinker_atropos.backends.local import microbatches

    gen = torch.Generator().manual_seed(7)
    prompt = base.tokenizer.encode(PROMPT)
    data = []
    for i in range(4):
        task = [200 + i] * (2 + i)  # each row's own, from its first token on
        reply = torch.randint(0, 256, (3 + i,), generator=gen).tolist()
        data.append(_rl_datum(prompt + task + reply, len(prompt) + len(task), gen))
    tokens = [d.model_input.to_ints() for d in data]
    trained = [microbatches.first_trained(d.loss_fn_inputs["advantages"].tolist()) for d in data]
    (group,) = microbatches.plan(tokens, trained, client.model.config.vocab_size)
    assert group.prefix == len(prompt) and sorted(r for p in group.passes for r in p) == [0, 1, 2, 3]
    shared = client.forward_backward(data, "importance_sampling")
    got = torch.cat([p.grad.flatten() for p in client.params])
    client.optimizer.zero_grad(set_to_none=True)
    monkeypatch.setattr(microbatches, "MIN_SHARED_PREFIX", 10_000)  # every row run whole
    whole = client.forward_backward(data, "importance_sampling")
    want = torch.cat([p.grad.flatten() for p in client.params])
    assert (got - want).norm() / want.norm() <= _grad_rel(client.model, data)
    for a, b in zip(shared.loss_fn_outputs, whole.loss_fn_outputs):
        torch.testing.assert_close(
            a["logprobs"].to_torch(), b["logprobs"].to_torch(), rtol=0, atol=_lp_tol(client.model, data)
        )


def test_bfloat16_compute_trains_the_same_direction_within_its_precision(base, tmp_path: Path) -> None:
    """`local_compute: bfloat16` (mixed precision) gives the float32 trainer's logprobs within
    bfloat16's precision and a gradient pointing the same way; `auto` takes it only where native."""
    from tinker_atropos.backends.local.precision import compute_dtype, emulation_warning

    data = _batch(base, k=6, seed=5)
    grads, logprobs = {}, {}
    for compute in ("float32", "bfloat16"):
        c = LocalTrainingClient(base, rank=4, run_dir=tmp_path / compute, run_name="t", seed=0, compute=compute)
        _nudge(c)
        out = c.forward_backward(data, "importance_sampling")
        grads[compute] = torch.cat([p.grad.flatten() for p in c.params])
        logprobs[compute] = torch.cat([o["logprobs"].to_torch() for o in out.loss_fn_outputs])
    assert (logprobs["float32"] - logprobs["bfloat16"]).abs().mean() < 0.05
    assert not torch.equal(logprobs["float32"], logprobs["bfloat16"])  # it really ran in bfloat16
    cosine = torch.nn.functional.cosine_similarity(grads["float32"], grads["bfloat16"], dim=0)
    assert cosine > 0.95, cosine
    cpu = torch.device("cpu")
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert compute_dtype("float32", cpu) is None and compute_dtype("bfloat16", cpu) is torch.bfloat16
    assert compute_dtype("auto", cpu) is (torch.bfloat16 if native else None)
    # asked for explicitly where it is emulated (AVX2-only CPUs), the trainer's log says so and how to fix it
    assert emulation_warning("float32", cpu) is None and emulation_warning("auto", cpu) is None
    said = emulation_warning("bfloat16", cpu)
    assert said is None if native else "set local_compute to 'auto' or 'float32'" in said


def test_plan_shares_each_groups_prompt_and_runs_the_rest_whole() -> None:
    from tinker_atropos.backends.local import microbatches
    from tinker_atropos.backends.local.microbatches import PromptGroup, plan

    a, b = list(range(10)), list(range(100, 112))
    tokens = [[*a, 1, 2], [*a, 3], [*b, 4], [*b, 5, 6, 7], a[:5] + [9] * 9, [*b, 8]]
    trained = [10, 10, 12, 12, 5, 3]  # the last row trains from its 4th token: too short a prompt to share
    assert plan(tokens, trained, vocab_size=256) == [
        PromptGroup([[0], [1]], prefix=10),  # replies of 2 and 1 tokens: together, a third would be padding
        PromptGroup([[3], [2]], prefix=12),
        PromptGroup([[4, 5]]),  # 14 and 13 tokens: little padding, one pass
    ]
    # A prompt alone in its batch is not worth a cache; a whole-row "prompt" keeps one token to run.
    assert plan([[*a, 1]], [10], vocab_size=256) == [PromptGroup([[0]])]
    assert plan([a, a], [10, 10], vocab_size=256) == [PromptGroup([[0, 1]], prefix=9)]
    # Prompts that differ after a common beginning (a supervised batch): that beginning is shared.
    tasks = [[*a, 50, 51, 1, 2], [*a, 60, 3, 4], [*a, 70, 71, 72, 5], [*b, 6]]
    assert plan(tasks, [12, 11, 13, 12], vocab_size=256) == [PromptGroup([[0, 2, 1]], prefix=10), PromptGroup([[3]])]
    # Only the replies count against a pass's budget: a long prompt is run once for all its passes.
    long_prompt = list(range(1000))
    rows = [[*long_prompt, *range(5000, 5000 + n)] for n in (40, 30, 20, 10)]
    vocab = 1 << 20  # a big vocabulary: a budget of 64 tokens a pass
    budget = microbatches.token_budget(vocab)
    (group,) = plan(rows, [1000] * 4, vocab)
    assert group.prefix == 1000 and len(group.passes) > 1
    assert [r for p in group.passes for r in p] == [0, 1, 2, 3] and all(
        len(p) * (len(rows[p[0]]) - 1000) <= budget for p in group.passes
    )
    # Where a token's activations are given (a CPU trainer), they bound a pass too: here 90 tokens.
    rows = [[*long_prompt, *range(5000, 5000 + n)] for n in (40, 38, 36, 34)]
    assert plan(rows, [1000] * 4, vocab_size=256) == [PromptGroup([[0, 1, 2, 3]], prefix=1000)]
    heavy = microbatches.ACTIVATIONS_BUDGET // 90
    assert microbatches.token_budget(256, heavy) == 90
    assert plan(rows, [1000] * 4, vocab_size=256, token_bytes=heavy) == [PromptGroup([[0, 1], [2, 3]], prefix=1000)]


def test_a_cpu_trainer_sizes_its_passes_by_the_models_activations(client) -> None:
    from tinker_atropos.backends.local.microbatches import activation_bytes
    from tinker_atropos.backends.local.training import _activation_bytes_on_cpu

    c = client.model.config
    assert client._token_bytes == activation_bytes(c.hidden_size, c.intermediate_size, c.num_hidden_layers) > 0
    assert _activation_bytes_on_cpu(c, torch.device("cuda")) == 0  # a GPU's passes: by their logits alone
    assert _activation_bytes_on_cpu(object(), torch.device("cpu")) == 0  # sizes the config does not name


def test_malformed_datum_is_rejected_before_any_gradient(client, base) -> None:
    good = _batch(base, k=2)
    bad = types.Datum(
        model_input=good[0].model_input, loss_fn_inputs={**good[0].loss_fn_inputs, "advantages": torch.zeros(3)}
    )
    with pytest.raises(
        ValueError, match=r"datum 2: loss_fn_inputs \['advantages'\] must have one entry per input token"
    ):
        client.forward_backward([*good, bad], "importance_sampling")
    with pytest.raises(ValueError, match=r"datum 0: loss_fn 'ppo' needs loss_fn_inputs \['logprobs', 'advantages'\]"):
        client.forward_backward(
            [
                types.Datum(
                    model_input=good[0].model_input,
                    loss_fn_inputs={"target_tokens": good[0].loss_fn_inputs["target_tokens"]},
                )
            ],
            "ppo",
        )
    with pytest.raises(ValueError, match="is not a loss of this product: use one of"):
        client.forward_backward(good, "gspo")
    assert all(p.grad is None for p in client.params)


def test_save_state_and_resume_reproduce_logits_and_optimizer(client, base, tmp_path: Path) -> None:
    data = _batch(base, k=3, seed=2)
    for _ in range(2):
        client.forward_backward(data, "importance_sampling")
        client.optim_step(types.AdamParams(learning_rate=1e-3))
    path = asyncio.run(client.save_state_async("ckpt-1"))
    assert path == str(tmp_path / "checkpoints" / "t" / "weights" / "ckpt-1")
    ids = torch.tensor([data[0].model_input.to_ints()])
    with torch.no_grad():
        want = client.model(input_ids=ids).logits

    resumed = create_training_backend(_cfg(tmp_path, seed=7, resume_from=path))  # different LoRA init
    assert resumed.steps == client.steps == 2
    with torch.no_grad():
        assert torch.equal(resumed.model(input_ids=ids).logits, want)
    # Same optimizer state: one more identical step gives bit-identical parameters.
    for c in (client, resumed):
        c.forward_backward(data, "importance_sampling")
        c.optim_step(types.AdamParams(learning_rate=1e-3))
    for a, b in zip(client.params, resumed.params):
        assert torch.equal(a, b)
    index = [
        json.loads(line) for line in (tmp_path / "checkpoints" / "t" / "checkpoints.jsonl").read_text().splitlines()
    ]
    assert index[0]["kind"] == "weights" and index[0]["path"] == path and index[0]["step"] == 2


def test_sampler_from_saved_weights_matches_trainer(client, base) -> None:
    path = asyncio.run(client.save_weights_for_sampler_async("s1"))
    assert Path(path, "adapter_model.safetensors").exists() and Path(path).parent.name == "sampler_weights"
    sampler = asyncio.run(client.create_sampling_client_async(path))
    prompt = base.tokenizer.encode(PROMPT)
    res = asyncio.run(
        sampler.sample_async(
            types.ModelInput.from_ints(prompt), 4, types.SamplingParams(max_tokens=12, seed=3, stop=[])
        )
    )
    data = [
        types.Datum(
            model_input=types.ModelInput.from_ints(prompt + s.tokens[:-1]),
            loss_fn_inputs={
                "target_tokens": prompt[1:] + s.tokens,
                "weights": [0.0] * (len(prompt) + len(s.tokens) - 1),
            },
        )
        for s in res.sequences
    ]
    out = client.forward_backward(data, "cross_entropy")
    # merged LoRA (one more rounding per weight) vs unmerged, a KV cache vs one pass: float noise only
    tol = logprob_tol(client.model.config, len(prompt) + 12, float(abs(res.sequences[0].logprobs_np).max()) + 1.0)
    for s, o in zip(res.sequences, out.loss_fn_outputs):
        trainer_lp = o["logprobs"].to_numpy()[len(prompt) - 1 :]
        assert abs(trainer_lp - s.logprobs_np).max() <= tol


def test_a_seeded_sampler_draws_the_same_replies_for_requests_without_a_seed(base) -> None:
    """A run's seed reaches its samplers: the same requests in the same order sample alike."""
    prompt = types.ModelInput.from_ints(base.tokenizer.encode(PROMPT))

    def replies(seed: int | None) -> list[list[int]]:
        sampler = create_sampler(base, seed=seed)
        params = types.SamplingParams(max_tokens=8, stop=[])
        return [list(s.tokens) for _ in range(2) for s in sampler.sample(prompt, 3, params).sequences]

    first = replies(7)
    assert first == replies(7) and first != replies(8) and first != replies(None)
    assert len({tuple(r) for r in first}) > 1  # still a sample, not one reply repeated


def test_sampling_params(base) -> None:
    sampler = create_sampler(base)
    prompt = types.ModelInput.from_ints(base.tokenizer.encode(PROMPT))

    def sample(n: int, **kw) -> types.SampleResponse:
        return sampler.sample(prompt, n, types.SamplingParams(**kw))

    a, b, c = (sample(6, max_tokens=10, seed=s, stop=[]) for s in (1, 1, 2))
    assert all(len(s.tokens) == 10 and s.stop_reason == "length" for s in a.sequences)
    assert [s.tokens for s in a.sequences] == [s.tokens for s in b.sequences]
    assert [s.tokens for s in a.sequences] != [s.tokens for s in c.sequences]
    assert len({tuple(s.tokens) for s in a.sequences}) > 1  # samples differ within a batch

    greedy = sample(3, max_tokens=16, temperature=0.0, stop=[]).sequences
    assert len({tuple(s.tokens) for s in greedy}) == 1
    assert sample(2, max_tokens=16, top_k=1, seed=5, stop=[]).sequences[0].tokens == greedy[0].tokens
    assert sample(2, max_tokens=16, top_p=1e-6, seed=5, stop=[]).sequences[0].tokens == greedy[0].tokens
    top_k = sample(8, max_tokens=16, top_k=3, seed=5, stop=[]).sequences  # only top-3 tokens
    ids = base.tokenizer.encode(PROMPT)
    for s in top_k:  # reported = model logprobs: a KV-cached decode against one pass over the whole
        full = torch.tensor(sampler.compute_logprobs(types.ModelInput.from_ints(ids + s.tokens))[len(ids) :])
        tol = logprob_tol(sampler.model.config, len(ids) + 16, float(full.abs().max()) + 1.0)
        assert abs(full - torch.tensor(s.logprobs)).max() <= tol

    # Stop token ids: the sample ends at (and keeps) the first stop token.
    stop_ids = list(range(0, 256, 2))
    for s in sample(8, max_tokens=40, seed=4, stop=stop_ids).sequences:
        evens = [i for i, t in enumerate(s.tokens) if t in stop_ids]
        if s.stop_reason == "stop":
            assert evens == [len(s.tokens) - 1]
        else:
            assert evens == [] and len(s.tokens) == 40
    # Stop strings: cut right after the first occurrence (greedy output is known in advance).
    first = next(i for i, t in enumerate(greedy[0].tokens) if 33 <= t < 127)  # a printable byte
    needle = chr(greedy[0].tokens[first])
    cut = sample(2, max_tokens=16, temperature=0.0, stop=[needle]).sequences[0]
    assert cut.stop_reason == "stop" and cut.tokens == greedy[0].tokens[: first + 1]
    # Default stop (None) is EOS.
    eos_stop = sample(16, max_tokens=60, seed=0).sequences
    assert all(s.tokens[-1] in base.eos_token_ids for s in eos_stop if s.stop_reason == "stop")


def test_factory_builds_local_backends_and_reports_unloadable_models(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    training = create_training_backend(cfg)
    assert training.base_model == "tiny-chat" and training.get_tokenizer().eos_token == "<|im_end|>"
    sampler = create_base_sampler(cfg)
    assert asyncio.run(sampler.compute_logprobs_async(types.ModelInput.from_ints([1, 2, 3])))[0] is None
    with pytest.raises(BackendUnavailable, match="cannot load model"):
        create_training_backend(_cfg(tmp_path, base_model=str(tmp_path / "no-such-model")))
