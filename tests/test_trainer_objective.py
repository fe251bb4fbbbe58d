"""A step's objective: each loss aggregation's factors against hand-computed ones, the rescaling that
carries them exact on every loss linear in the advantages, the batch advantage scale, the KL penalty in
the advantages, each loss's settings sent explicitly, and the config's refusals of what cannot be
computed as asked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from tinker import types

from tinker_atropos.losses import LOSSES
from tinker_atropos.losses.on_tinker import engine_factors
from tinker_atropos.trainer.batches import groups_to_datums
from tinker_atropos.trainer.config import ConfigError, EnvSection, TinkerConfig, parse_run_config
from tinker_atropos.trainer.objective import (
    aggregated,
    aggregation_factors,
    with_kl_penalty,
)

CONFIGS = Path(__file__).resolve().parents[1] / "tinker-atropos" / "configs"
MASKS = [np.array([0, 0, 1, 1, 1], bool), np.array([0, 1], bool), np.array([0, 0, 1, 1], bool)]  # 3, 1, 2 tokens


def tinker(**fields: object):
    data = yaml.safe_load((CONFIGS / "local.yaml").read_text())
    data["trainer"].update(fields)
    return parse_run_config(data).trainer


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("sum", [1.0, 1.0, 1.0]),
        ("token_mean", [1 / 6, 1 / 6, 1 / 6]),  # DAPO: the step's 6 reply tokens
        ("seq_mean", [1 / (3 * 3), 1 / (3 * 1), 1 / (3 * 2)]),  # GRPO: each reply's mean, then the mean of 3
        ("constant", [1 / (3 * 16)] * 3),  # Dr. GRPO: 3 replies x a 16-token budget
    ],
)
def test_each_aggregation_weighs_replies_as_its_paper_does(how: str, expected: list[float]) -> None:
    assert aggregation_factors(MASKS, how, budget=16) == pytest.approx(expected, rel=1e-12)


def test_a_factor_scales_the_loss_it_stands_for_on_every_linear_loss() -> None:
    """Sum over tokens of loss(c * A) == c * sum of loss(A), for each of Tinker's linear losses (ratios
    inside and outside the clip range, a negative advantage): what makes a rescaled advantage exact."""
    lp = np.array([-1.0, -0.5, -2.0, -0.1])
    q = np.array([-1.3, -0.5, -1.0, -0.9])  # ratios e^0.3, 1, e^-1, e^0.8
    adv = np.array([0.7, -0.4, 1.2, -1.5])

    def per_token(name: str, a: np.ndarray) -> np.ndarray:
        r = np.exp(lp - q)
        if name == "importance_sampling":
            return -r * a
        low, high = {"ppo": (0.8, 1.28), "cispo": (0.0, 4.0)}[name]
        if name == "ppo":
            return -np.minimum(r * a, np.clip(r, low, high) * a)
        return -np.clip(r, low, high) * lp * a

    for name in ("importance_sampling", "ppo", "cispo"):
        for c in (1 / 6, 1 / 48, 3.0):
            assert per_token(name, c * adv).sum() == pytest.approx(c * per_token(name, adv).sum(), rel=1e-12)


def test_aggregated_datums_carry_scaled_advantages_only_on_their_replies() -> None:
    datums = [_datum(m, adv=2.0) for m in MASKS]
    factors = aggregation_factors(MASKS, "token_mean", budget=16)
    for datum, mask in zip(aggregated(datums, factors), MASKS):
        assert np.allclose(datum.loss_fn_inputs["advantages"].to_numpy(), np.where(mask, 2.0 / 6, 0.0))


def test_the_batch_scale_divides_by_the_batch_spread_and_the_group_scale_by_each_groups() -> None:
    wide = {"tokens": [[1, 2, 3]] * 2, "masks": [[-100, 2, 3]] * 2, "scores": [0.0, 1.0]}
    narrow = {"tokens": [[1, 2, 3]] * 2, "masks": [[-100, 2, 3]] * 2, "scores": [0.4, 0.6]}
    batch_std = float(np.std([0.0, 1.0, 0.4, 0.6], ddof=1))

    def reply_advantages(scale: str) -> list[float]:
        conv = groups_to_datums([wide, narrow], scale)
        return [float(d.loss_fn_inputs["advantages"].to_numpy()[-1]) for d in conv.datums]

    assert reply_advantages("none") == pytest.approx([-0.5, 0.5, -0.1, 0.1], rel=1e-6)
    by_batch = [a / (batch_std + 1e-4) for a in (-0.5, 0.5, -0.1, 0.1)]
    assert reply_advantages("batch") == pytest.approx(by_batch, rel=1e-5)
    group = reply_advantages("group")  # each group's std (ddof=1): both groups weigh the same
    assert group[1] == pytest.approx(group[3], rel=1e-3) and group[1] == pytest.approx(0.5 / (0.5**0.5 + 1e-4), 1e-5)


def test_the_kl_penalty_moves_reply_advantages_by_beta_times_the_log_ratio() -> None:
    mask = np.array([0, 1, 1], bool)
    datum = _datum(mask, adv=1.0, sampled=np.array([0.0, -0.5, -2.0]))
    (penalised,) = with_kl_penalty([datum], [mask], [np.array([0.0, -1.0, -1.5])], beta=0.1)
    # sampled - base: +0.5 (the policy likes the token more: less advantage), -0.5 (more)
    assert penalised.loss_fn_inputs["advantages"].to_numpy() == pytest.approx([0.0, 0.95, 1.05], rel=1e-6)


def settings(t: TinkerConfig, factor: float) -> dict[str, float] | None:
    return LOSSES[t.loss_fn].settings(t, factor)


def test_each_loss_gets_every_setting_explicitly() -> None:
    assert settings(tinker(loss_fn="ppo"), 1.0) == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    clip_higher = tinker(loss_fn="ppo", clip_high=1.28)
    assert settings(clip_higher, 1.0) == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28}
    assert settings(tinker(loss_fn="cispo"), 1.0) == {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}
    assert settings(tinker(loss_fn="dro", dro_beta=0.1), 0.25) == {"beta": pytest.approx(0.025)}
    assert settings(tinker(loss_fn="importance_sampling"), 1.0) is None


def test_constant_counts_the_environments_reply_budget() -> None:
    assert EnvSection(max_completion_tokens=16, max_token_length=256).reply_budget() == 16
    assert EnvSection(max_token_length=256).reply_budget() == 256
    assert EnvSection().reply_budget() is None  # the trainer's max_reply_tokens then


@pytest.mark.parametrize(
    ("fields", "refused"),
    [
        ({"loss_fn": "importance_sampling", "clip_high": 1.3}, "clip_high applies to ppo and cispo, not loss_fn"),
        ({"loss_fn": "cispo", "dro_beta": 0.2}, "dro_beta applies to dro, not loss_fn 'cispo'"),
        ({"loss_fn": "dro", "loss_aggregation": "seq_mean"}, "cannot be computed exactly"),
        ({"loss_aggregation": "mean"}, "loss_aggregation"),
        ({"clip_high": 0.9, "loss_fn": "ppo"}, "clip_high"),
        ({"advantage_scale": "global"}, "advantage_scale"),
        ({"kl_beta": -0.1}, "kl_beta"),
    ],
)
def test_what_cannot_be_computed_as_asked_is_refused_with_the_reason(fields: dict, refused: str) -> None:
    with pytest.raises(ConfigError, match=refused):
        tinker(**fields)


@pytest.mark.parametrize("loss_fn", sorted(LOSSES))
def test_every_loss_is_taken_on_every_backend(loss_fn: str) -> None:
    """A loss without the service's built-in of the same math runs there as two passes (losses/on_tinker.py)."""
    for fields in ({}, {"backend": "tinker", "base_model": "Qwen/Qwen3-8B"}, {"self_hosted": True}):
        assert tinker(loss_fn=loss_fn, **fields).loss_fn == loss_fn


def test_configs_written_before_the_batch_scale_still_load() -> None:
    assert tinker(advantage_scale="group_std").advantage_scale == "group"


def _datum(mask: np.ndarray, adv: float, sampled: np.ndarray | None = None) -> types.Datum:
    n = len(mask)
    sampled = np.where(mask, -1.0, 0.0) if sampled is None else sampled
    return types.Datum(
        model_input=types.ModelInput.from_ints(list(range(1, n + 1))),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.arange(2, n + 2, dtype=np.int64)),
            "logprobs": types.TensorData.from_numpy(sampled.astype(np.float32)),
            "advantages": types.TensorData.from_numpy(np.where(mask, adv, 0.0).astype(np.float32)),
        },
    )


@pytest.mark.parametrize("how", ["sum", "token_mean", "seq_mean", "constant"])
def test_on_a_self_hosted_skyrl_engine_each_aggregation_is_tinkers(how: str) -> None:
    """SkyRL's engine takes each datum's mean over its target tokens, then the mean of the datums
    (skyrl/backends/jax.py). With the engine factors in the advantages, that reduction of the
    importance-sampling loss equals Tinker's sum of the same loss with the aggregation's factors alone."""
    ratios = [np.array([1.1, 0.9, 1.0, 1.3]), np.array([0.8]), np.array([1.0, 1.2, 0.7])]
    advantages = [np.array([0.0, 0.5, 0.5, 0.5]), np.array([-1.0]), np.array([0.0, 0.0, 0.25])]
    masks = [a != 0 for a in advantages]
    datums = [
        types.Datum(model_input=types.ModelInput.from_ints(list(range(len(a)))), loss_fn_inputs={}) for a in advantages
    ]
    factors = aggregation_factors(masks, how, budget=16)
    tinkers_sum = sum(float((-r * a * f).sum()) for r, a, f in zip(ratios, advantages, factors))
    engine = engine_factors(datums)
    per_datum_mean = [(-r * a * f * e).sum() / len(a) for r, a, f, e in zip(ratios, advantages, factors, engine)]
    assert float(np.mean(per_datum_mean)) == pytest.approx(tinkers_sum, rel=1e-12)
