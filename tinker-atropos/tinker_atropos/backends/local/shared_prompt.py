"""A group's shared prompt, run once for all of its forward passes, gradients included.

The prompt's keys and values are computed with their graph kept. Each pass continues from
detached copies of them (leaf tensors), so its backward stops there and adds the gradient with
respect to the prompt's cache to the leaves; `backward` then sends that sum through the prompt
once. The same gradients as running every row whole, for one prompt's compute, however many
passes the group's replies need.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache


@dataclass
class SharedPrompt:
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer [1, heads, prefix, dim], with the graph
    leaves: list[tuple[torch.Tensor, torch.Tensor]]  # the same, detached: where each pass's backward stops
    logprobs: torch.Tensor  # [prefix, vocab]: the prompt's own next-token log-probabilities (no graph)

    @classmethod
    def run(cls, model: torch.nn.Module, prompt: torch.Tensor) -> SharedPrompt:
        """`prompt`: [1, prefix] token ids."""
        out = model(input_ids=prompt, use_cache=True)
        kv = [(layer.keys, layer.values) for layer in out.cache.layers]
        leaves = [(k.detach().requires_grad_(), v.detach().requires_grad_()) for k, v in kv]
        return cls(kv, leaves, torch.log_softmax(out.logits.detach()[0].float(), dim=-1))

    @property
    def length(self) -> int:
        return self.logprobs.shape[0]

    def cache(self, rows: int) -> DynamicCache:
        """The prompt's cache under `rows` replies (a view per row: their gradients add up)."""
        return DynamicCache([(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in self.leaves])

    def target_logprobs(self, targets: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of `targets` [rows, prefix] at the prompt's positions."""
        rows = targets.shape[0]
        return self.logprobs.expand(rows, -1, -1).gather(-1, targets[..., None])[..., 0]

    def backward(self) -> None:
        """The passes' gradients through the prompt, once."""
        outputs, grads = [], []
        for pair, leaf_pair in zip(self.kv, self.leaves):
            for tensor, leaf in zip(pair, leaf_pair):
                if leaf.grad is not None:
                    outputs.append(tensor)
                    grads.append(leaf.grad)
        if outputs:
            torch.autograd.backward(outputs, grads)
