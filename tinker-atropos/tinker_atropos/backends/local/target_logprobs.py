"""The trainer's output head and log-softmax in one step, a chunk of positions at a time.

The plain path (`lm_head`, then cross_entropy) writes the [tokens, vocab] logits, their
log-softmax and, in the backward, their gradient: on SmolLM2 (49k vocab) that memory traffic cost
as much as the head's matmul. Here each chunk's logits live only while the chunk is computed (the
backward computes them again), and the backward skips the positions whose loss has no gradient
(the prompt, tool results, padding, replies of groups with no advantage). The head is frozen (LoRA
never trains it): only the hidden states get a gradient. Float32 throughout, as the sampler's head.
"""

from __future__ import annotations

from typing import Any

import torch

CHUNK_ELEMENTS = 1 << 22  # logits per chunk (16 MB in float32): small enough to stay in cache


class _TargetLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        rows = _chunk_rows(weight)
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(out)
        for start in range(0, hidden.shape[0], rows):
            logits = hidden[start : start + rows] @ weight.T
            lse[start : start + rows] = torch.logsumexp(logits, dim=-1)
            out[start : start + rows] = logits.gather(1, targets[start : start + rows, None])[:, 0]
        ctx.save_for_backward(hidden, weight, targets, lse)
        return out - lse

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        hidden, weight, targets, lse = ctx.saved_tensors
        grad_hidden = torch.zeros_like(hidden)
        live = grad.nonzero()[:, 0]
        rows = _chunk_rows(weight)
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, live.shape[0], rows):
                idx = live[start : start + rows]
                g = grad[idx].float()
                # d(logit_t - lse)/d logits = onehot(t) - softmax
                probs = torch.exp(hidden[idx] @ weight.T - lse[idx, None]).mul_(-g[:, None])
                probs[torch.arange(idx.shape[0], device=idx.device), targets[idx]] += g
                grad_hidden[idx] = probs @ weight
        return grad_hidden, None, None


def _chunk_rows(weight: torch.Tensor) -> int:
    return max(1, CHUNK_ELEMENTS // weight.shape[0])


def target_logprobs(hidden: torch.Tensor, head: torch.nn.Linear, targets: torch.Tensor) -> torch.Tensor:
    """log p(targets) [*shape] under `head` from `hidden` [*shape, dim], in float32."""
    if head.weight.requires_grad or head.bias is not None:
        raise ValueError("the fused head takes a frozen output head without bias")
    shape = targets.shape
    with torch.autocast(hidden.device.type, enabled=False):
        flat = hidden.reshape(-1, hidden.shape[-1]).float()
        out = _TargetLogprobs.apply(flat, head.weight.float(), targets.reshape(-1))
    return out.reshape(shape)


def fusable_head(causal_lm: torch.nn.Module) -> torch.nn.Linear | None:
    """The output head when `causal_lm` computes logits as `lm_head(model(...))` and nothing more
    (no logit scaling or soft-capping), else None: then the trainer takes the model's logits."""
    head = causal_lm.get_output_embeddings()
    config = causal_lm.config
    plain = not any(getattr(config, name, None) for name in ("final_logit_softcapping", "logit_scale"))
    if plain and type(head) is torch.nn.Linear and head.bias is None and hasattr(causal_lm, "model"):
        return head
    return None
