"""The local backend's policy losses against Tinker's formulas worked by hand (plain Python math on a
hand-made batch), then through the real local backend on tiny-chat."""

from __future__ import annotations

import math

import pytest
import torch
from numerics import U, grad_rel, sum_tol
from test_local_backend import PROMPT, _batch, _nudge
from tinker import types

from tinker_atropos.backends.local import LocalTrainingClient, load_base_model
from tinker_atropos.losses import LOSSES, loss_named

# Two datums of 5 positions: position 0 a prompt target (q = 0, A = 0), then a completion.
# log-ratios lp - q chosen so ratios fall below 0.8, inside, between 1.2 and 1.28, and above 4.
LP = [[-2.0, -1.0, -3.0, -0.5, -2.2], [-1.5, -0.6, -2.3, -0.4, -1.05]]
LOG_RATIO = [[0.0, 0.5, -0.5, 0.1, 0.2], [0.0, 0.4, -0.3, 1.6, -0.05]]
Q = [[0.0 if t == 0 else lp - d for t, (lp, d) in enumerate(zip(a, b))] for a, b in zip(LP, LOG_RATIO)]
ADV = [[0.0, 1.5, 1.5, 1.5, 1.5], [0.0, -0.7, -0.7, -0.7, -0.7]]
WEIGHTS = [[0.0, 1.0, 1.0, 0.5, 2.0], [0.0, 1.0, 0.0, 1.0, 1.0]]
BETA = 0.1

CASES = [  # (loss_fn, loss_fn_config, the config the hand formulas use)
    ("importance_sampling", None, {}),
    ("ppo", None, {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}),
    ("ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28}, None),
    ("cispo", None, {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}),
    ("cispo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}, None),
    ("dro", {"beta": BETA}, None),
    ("cross_entropy", None, {}),
]


def _clip(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def _by_hand(loss_fn: str, lp: float, q: float, a: float, w: float, cfg: dict[str, float]) -> tuple[float, float]:
    """(loss, d loss / d lp) at one token, from Tinker's definitions."""
    if loss_fn == "cross_entropy":
        return -w * lp, -w
    if loss_fn == "dro":  # the penalty only where the sampler gave a logprob (q != 0)
        penalty, slope = (0.5 * cfg["beta"] * (lp - q) ** 2, cfg["beta"] * (lp - q)) if q != 0 else (0.0, 0.0)
        return -(lp * a - penalty), -(a - slope)
    r = math.exp(lp - q)
    if loss_fn == "importance_sampling":
        return -r * a, -r * a
    c = _clip(r, cfg["clip_low_threshold"], cfg["clip_high_threshold"])
    if loss_fn == "cispo":
        return -c * lp * a, -c * a
    # ppo: the clipped term is a constant where it is the smaller one (the clip binds)
    return (-c * a, 0.0) if c * a < r * a else (-r * a, -r * a)


def _tensors(**rows: list[list[float]]) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v, dtype=torch.float64) for k, v in rows.items()}


@pytest.mark.parametrize(("loss_fn", "config", "hand_cfg"), CASES)
def test_elementwise_loss_and_its_gradient_are_tinkers_formulas(loss_fn, config, hand_cfg) -> None:
    cfg = hand_cfg if hand_cfg is not None else config
    inputs = _tensors(logprobs=Q, advantages=ADV)
    if loss_fn == "cross_entropy":
        inputs = _tensors(weights=WEIGHTS)
    lp = torch.tensor(LP, dtype=torch.float64, requires_grad=True)
    loss = loss_named(loss_fn).elementwise(lp, inputs, config)
    loss.sum().backward()
    assert lp.grad is not None
    for i in range(2):
        for t in range(5):
            w = WEIGHTS[i][t] if loss_fn == "cross_entropy" else 1.0
            want, slope = _by_hand(loss_fn, LP[i][t], Q[i][t], ADV[i][t], w, cfg)
            assert loss[i, t].item() == pytest.approx(want, rel=1e-6, abs=1e-12), (i, t)
            assert lp.grad[i, t].item() == pytest.approx(slope, rel=1e-6, abs=1e-12), (i, t)
    if loss_fn == "ppo":  # the batch does clip: some ratios have no gradient
        assert (lp.grad[:, 1:] == 0).any()


def test_the_clip_bounds_change_what_is_clipped() -> None:
    """ratio e^0.2 = 1.22 with A > 0: clipped at 1.2 (no gradient), not at 1.28."""
    inputs, lp = _tensors(logprobs=Q, advantages=ADV), torch.tensor(LP, dtype=torch.float64, requires_grad=True)
    (g_default,) = torch.autograd.grad(loss_named("ppo").elementwise(lp, inputs).sum(), lp)
    wide = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28}
    (g_wide,) = torch.autograd.grad(loss_named("ppo").elementwise(lp, inputs, wide).sum(), lp)
    assert g_default[0, 4] == 0 and g_wide[0, 4] == pytest.approx(-math.exp(0.2) * 1.5, rel=1e-12)


def test_weights_multiply_every_loss_and_bad_configs_are_refused() -> None:
    inputs = _tensors(logprobs=Q, advantages=ADV, weights=WEIGHTS)
    lp = torch.tensor(LP, dtype=torch.float64)
    for loss_fn in ("importance_sampling", "ppo", "cispo"):
        plain = loss_named(loss_fn).elementwise(lp, {k: inputs[k] for k in ("logprobs", "advantages")})
        assert torch.equal(loss_named(loss_fn).elementwise(lp, inputs), plain * inputs["weights"])
    with pytest.raises(ValueError, match=r"'dro' needs loss_fn_config \['beta'\]"):
        loss_named("dro").elementwise(lp, inputs)
    with pytest.raises(
        ValueError, match=r"use one of \['cispo', 'cross_entropy', 'dro', 'importance_sampling', 'ppo'\]"
    ):
        loss_named("gspo").elementwise(lp, inputs)
    with pytest.raises(ValueError, match=r"takes loss_fn_config keys \[\], not \['beta'\]"):
        loss_named("importance_sampling").elementwise(lp, inputs, {"beta": 0.1})
    with pytest.raises(ValueError, match="clip_low_threshold is above clip_high_threshold"):
        loss_named("ppo").elementwise(lp, inputs, {"clip_low_threshold": 1.3})
    assert all(name == loss.name for name, loss in LOSSES.items())


def test_gradient_mask_covers_dros_penalty_where_the_advantage_is_zero() -> None:
    q = torch.tensor([[0.0, -1.0, -2.0]])
    adv = torch.tensor([[0.0, 0.0, 1.0]])
    for loss_fn in ("importance_sampling", "ppo", "cispo"):
        assert loss_named(loss_fn).gradient_mask({"logprobs": q, "advantages": adv}).tolist() == [[False, False, True]]
    assert loss_named("dro").gradient_mask({"logprobs": q, "advantages": adv}).tolist() == [[False, True, True]]
    weights = torch.tensor([[1.0, 0.0, 1.0]])
    assert loss_named("cross_entropy").gradient_mask({"weights": weights, "advantages": adv}).tolist() == [
        [True, False, True]
    ]
    assert loss_named("cross_entropy").gradient_mask({}) is None


# --- the real local backend ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    return load_base_model("tiny-chat", "cpu")


@pytest.fixture()
def trainer(tiny, tmp_path) -> LocalTrainingClient:
    c = LocalTrainingClient(tiny, rank=4, run_dir=tmp_path, run_name="t", seed=0)
    _nudge(c)  # off LoRA B = 0, where every A-gradient is zero
    return c


def _completion_only(tiny, data: list[types.Datum]) -> list[types.Datum]:
    """The product's datums: the sampler's logprobs 0 on the prompt's targets."""
    n_prompt = len(tiny.tokenizer.encode(PROMPT))
    out = []
    for d in data:
        q = d.loss_fn_inputs["logprobs"].to_torch().clone()
        q[: n_prompt - 1] = 0.0
        out.append(types.Datum(model_input=d.model_input, loss_fn_inputs={**d.loss_fn_inputs, "logprobs": q}))
    return out


@pytest.mark.kernels
@pytest.mark.parametrize(("loss_fn", "config", "hand_cfg"), CASES)
def test_local_backend_loss_sum_is_the_elementwise_losses_of_its_logprobs(
    trainer, tiny, loss_fn, config, hand_cfg
) -> None:
    data = loss_named(loss_fn).datums(_completion_only(tiny, _batch(tiny, k=3, seed=11)))
    out = trainer.forward_backward(data, loss_fn, config)
    terms: list[float] = []
    for d, o in zip(data, out.loss_fn_outputs):
        lp = o["logprobs"].to_torch()
        inputs = {k: v.to_torch().float() for k, v in d.loss_fn_inputs.items() if k != "target_tokens"}
        mine = loss_named(loss_fn).elementwise(lp, inputs, config)
        # the same float32 ops on the same numbers, one row of a padded batch against a row alone
        torch.testing.assert_close(o["elementwise_loss"].to_torch(), mine, rtol=8 * U, atol=0)
        terms += mine.tolist()
    assert out.metrics["loss:sum"] == pytest.approx(math.fsum(terms), abs=sum_tol(terms) + 8 * U * sum(map(abs, terms)))
    assert any(p.grad is not None and p.grad.abs().max() > 0 for p in trainer.params)


@pytest.mark.kernels
def test_dro_trains_replies_without_advantage_and_not_their_prompts(trainer, tiny, monkeypatch) -> None:
    """dro's penalty has a gradient wherever the sampler gave a logprob, advantage or not: a reply
    whose advantages are all zero is still trained (its prompt is shared only up to the reply),
    and the prompt's positions (q = 0) add nothing."""
    from tinker_atropos.backends.local import microbatches

    first, second = _completion_only(tiny, _batch(tiny, k=2, seed=12))
    data = [  # a group's replies, two of them alike
        types.Datum(
            model_input=d.model_input,
            loss_fn_inputs={**d.loss_fn_inputs, "advantages": torch.zeros(d.model_input.length)},
        )
        for d in (first, first, second)
    ]
    out = trainer.forward_backward(data, "dro", {"beta": BETA})
    shared = torch.cat([p.grad.flatten() for p in trainer.params])
    n_prompt = len(tiny.tokenizer.encode(PROMPT))
    for o in out.loss_fn_outputs:
        assert (o["elementwise_loss"].to_torch()[: n_prompt - 1] == 0).all()
    trainer.optimizer.zero_grad(set_to_none=True)
    monkeypatch.setattr(microbatches, "MIN_SHARED_PREFIX", 10_000)  # every row run whole
    trainer.forward_backward(data, "dro", {"beta": BETA})
    whole = torch.cat([p.grad.flatten() for p in trainer.params])
    assert whole.norm() > 0
    lengths = [d.model_input.length for d in data]
    assert (shared - whole).norm() <= grad_rel(trainer.model.config, max(lengths), sum(lengths)) * whole.norm()
