"""The trainer's output head and log-softmax in one step, a chunk of positions at a time.

The plain path (`lm_head`, then cross_entropy) writes the [tokens, vocab] logits, their
log-softmax and, in the backward, their gradient: on SmolLM2 (49k vocab) that memory traffic cost
as much as the head's matmul. Here each chunk's logits live only while the chunk is computed; the
softmax is kept only where the loss can have a gradient (the caller says where: not the prompt,
tool results, padding or replies with no advantage), and the backward runs only there. The head is
frozen (LoRA never trains it): only the hidden states get a gradient. Float32 throughout, as the
sampler's head.
"""

from __future__ import annotations

from typing import Any

import torch

CHUNK_ELEMENTS = 1 << 22  # logits per chunk (16 MB in float32): small enough to stay in cache


class _TargetLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, live: torch.Tensor
    ) -> torch.Tensor:
        rows = _chunk_rows(weight)
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(out)
        kept = live.nonzero()[:, 0]
        probs = torch.empty(kept.shape[0], weight.shape[0], dtype=torch.float32, device=hidden.device)
        at = 0
        for start in range(0, hidden.shape[0], rows):
            logits = hidden[start : start + rows] @ weight.T
            chunk_lse = torch.logsumexp(logits, dim=-1)
            lse[start : start + rows] = chunk_lse
            out[start : start + rows] = logits.gather(1, targets[start : start + rows, None])[:, 0]
            mine = live[start : start + rows].nonzero()[:, 0]
            torch.exp(logits[mine] - chunk_lse[mine, None], out=probs[at : at + mine.shape[0]])
            at += mine.shape[0]
        ctx.save_for_backward(hidden, weight, targets, lse, live, kept, probs)
        return out - lse

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        hidden, weight, targets, lse, live, kept, probs = ctx.saved_tensors
        grad_hidden = torch.zeros_like(hidden)
        rows = _chunk_rows(weight)
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, kept.shape[0], rows):  # the softmax kept in the forward
                idx = kept[start : start + rows]
                grad_hidden[idx] = _grad_logits(probs[start : start + rows], grad[idx], targets[idx]) @ weight
            unkept = ((grad != 0) & ~live).nonzero()[:, 0]  # a gradient where none was expected
            for start in range(0, unkept.shape[0], rows):
                idx = unkept[start : start + rows]
                softmax = torch.exp(hidden[idx] @ weight.T - lse[idx, None])
                grad_hidden[idx] = _grad_logits(softmax, grad[idx], targets[idx]) @ weight
        return grad_hidden, None, None, None


def _grad_logits(softmax: torch.Tensor, grad: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """grad * d(logit_t - lse)/d logits = grad * (onehot(t) - softmax)."""
    g = grad.float()
    out = softmax * -g[:, None]
    out[torch.arange(g.shape[0], device=g.device), targets] += g
    return out


def _chunk_rows(weight: torch.Tensor) -> int:
    return max(1, CHUNK_ELEMENTS // weight.shape[0])


def target_logprobs(
    hidden: torch.Tensor, head: torch.nn.Linear, targets: torch.Tensor, live: torch.Tensor | None = None
) -> torch.Tensor:
    """log p(targets) [*shape] under `head` from `hidden` [*shape, dim], in float32. `live`
    [*shape] (default: everywhere) marks where the loss may have a gradient: the softmax is kept
    there for the backward, which computes it again anywhere else a gradient arrives."""
    if head.weight.requires_grad or head.bias is not None:
        raise ValueError("the fused head takes a frozen output head without bias")
    shape = targets.shape
    live = torch.ones(shape, dtype=torch.bool, device=targets.device) if live is None else live
    with torch.autocast(hidden.device.type, enabled=False):
        flat = hidden.reshape(-1, hidden.shape[-1]).float()
        out = _TargetLogprobs.apply(flat, head.weight.float(), targets.reshape(-1), live.reshape(-1))
    return out.reshape(shape)


def fused_parts(causal_lm: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Linear] | None:
    """The body and the output head when `causal_lm` computes logits as `lm_head(model(...))` and
    nothing more (no logit scaling or soft-capping), else None: then the trainer takes the model's
    logits."""
    head, body = causal_lm.get_output_embeddings(), getattr(causal_lm, "model", None)
    config = causal_lm.config
    plain = not any(getattr(config, name, None) for name in ("final_logit_softcapping", "logit_scale"))
    if plain and type(head) is torch.nn.Linear and head.bias is None and isinstance(body, torch.nn.Module):
        return body, head
    return None
