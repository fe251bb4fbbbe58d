"""How a loss runs through the Tinker SDK, on Tinker or a self-hosted SkyRL engine: the service's
built-in of the same name where it is the same math, else two passes of the service's own.

Two passes: a forward gives the trainer's logprobs lp of the targets; the loss's own math (its module)
gives each token's gradient g = dC/dlp there; then importance_sampling with q = lp and A = -g, whose
gradient at ratio 1 is exactly g. It costs a forward more than a built-in, and runs on any service that
has importance_sampling. (The SDK's `forward_backward_custom` sends -g as cross_entropy weights, which a
SkyRL engine divides by their sum: zero or negative for a policy loss.)

SkyRL's engine does not sum over tokens as Tinker does: it takes each datum's mean over its target
tokens (weights absent: every one, the prompt's included) and the mean of the step's datums
(skyrl/backends/jax.py: `per_seq_loss`, `AccumulatedGradients.get_mean`). Each datum's advantages are
sent times the step's datums times its target tokens, which gives Tinker's sum there; the loss it
reports is divided back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tinker import types

from tinker_atropos.backends.tinker_compat import loss_sum_of
from tinker_atropos.losses import loss_named
from tinker_atropos.losses.base import Loss
from tinker_atropos.trainer.objective import aggregated


def engine_factors(datums: Sequence[types.Datum]) -> list[float]:
    """Each datum's factor that turns a SkyRL engine's means into Tinker's sum."""
    return [float(len(datums) * max(d.model_input.length, 1)) for d in datums]


async def forward_backward(
    training: Any, data: Sequence[types.Datum], loss_fn: str, config: Mapping[str, float] | None, self_hosted: bool
) -> types.ForwardBackwardOutput:
    """`loss_fn` on `data` through the SDK's training client; its output as Tinker's built-in gives it
    (each datum's logprobs and elementwise_loss, `loss:sum`), whatever the service and the way."""
    loss = loss_named(loss_fn)
    way = loss.on_self_hosted if self_hosted else loss.on_tinker
    factors = engine_factors(data) if self_hosted else [1.0] * len(data)
    if way == "two_passes":
        return await two_passes(training, data, loss, loss.config(config), factors)
    sent = aggregated(list(data), factors)  # SkyRL's means undone, as a step's aggregation is applied
    given = dict(config) if config else None  # none sent for a loss without settings, as SkyRL 0.4 expects
    output = await training.forward_backward(sent, loss_fn, loss_fn_config=given)
    total = loss_sum_of(output, data, factors) if self_hosted else None
    return output if total is None else _with_loss(output, output.loss_fn_outputs, total)


def _with_loss(
    output: types.ForwardBackwardOutput, outputs: list[dict[str, types.TensorData]], total: float
) -> types.ForwardBackwardOutput:
    return types.ForwardBackwardOutput(
        loss_fn_output_type=output.loss_fn_output_type,
        loss_fn_outputs=outputs,
        metrics={**(output.metrics or {}), "loss:sum": total},
    )


def _array(values: Any) -> types.TensorData:
    return types.TensorData.from_numpy(np.asarray(values, dtype=np.float32))


def _at_ratio_one(datum: types.Datum, lp: np.ndarray, advantages: np.ndarray) -> types.Datum:
    inputs = {"target_tokens": datum.loss_fn_inputs["target_tokens"], "logprobs": _array(lp)}
    inputs["advantages"] = _array(advantages)
    return types.Datum(model_input=datum.model_input, loss_fn_inputs=inputs)


async def two_passes(
    training: Any, data: Sequence[types.Datum], loss: Loss, config: dict[str, float], factors: Sequence[float]
) -> types.ForwardBackwardOutput:
    import torch

    zeros = [np.zeros(d.model_input.length, dtype=np.float32) for d in data]
    probe = [_at_ratio_one(d, z, z) for d, z in zip(data, zeros)]
    forward = await training.forward(probe, "importance_sampling")
    surrogate, losses = [], []
    for datum, out, factor in zip(data, forward.loss_fn_outputs, factors):
        lp = torch.tensor(out["logprobs"].to_numpy().reshape(-1)[: datum.model_input.length], dtype=torch.float64)
        lp.requires_grad_(True)
        inputs = {k: v.to_torch().double() for k, v in datum.loss_fn_inputs.items() if k != "target_tokens"}
        per_token = loss.elementwise(lp, inputs, config)
        per_token.sum().backward()
        assert lp.grad is not None
        surrogate.append(_at_ratio_one(datum, lp.detach().numpy(), -lp.grad.numpy() * factor))
        losses.append(per_token.detach().float())
    output = await training.forward_backward(surrogate, "importance_sampling")
    outputs = [
        {**out, "elementwise_loss": types.TensorData.from_torch(values)}
        for out, values in zip(output.loss_fn_outputs, losses)
    ]
    return _with_loss(output, outputs, float(sum(float(v.sum()) for v in losses)))
