"""The trainer's fused head (backends/local/target_logprobs.py) against the plain head and
cross-entropy: the same log-probabilities and hidden-state gradients, chunked or not, with
positions whose loss has no gradient among the others."""

from __future__ import annotations

import pytest
import torch
from numerics import network_rel
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from tinker_atropos.backends.local import target_logprobs as fused

pytestmark = pytest.mark.kernels


def _plain(hidden: torch.Tensor, head: torch.nn.Linear, targets: torch.Tensor) -> torch.Tensor:
    logits = head(hidden).float()
    return -torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")


@pytest.mark.parametrize("chunk_elements", [1 << 22, 3 * 97])  # one chunk; three positions a chunk
@pytest.mark.parametrize("live", ["where the loss has weight", "everywhere", "missing a position"])
def test_fused_head_gives_the_plain_numbers_and_gradients(monkeypatch, chunk_elements: int, live: str) -> None:
    """`live` tells the head where to keep the softmax; a gradient that arrives elsewhere (a
    caller that got `live` wrong) is still computed, from the logits made again."""
    monkeypatch.setattr(fused, "CHUNK_ELEMENTS", chunk_elements)
    gen = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 97, bias=False).requires_grad_(False)
    head.weight.copy_(torch.randn(97, 16, generator=gen))
    targets = torch.randint(0, 97, (3, 11), generator=gen)
    weights = torch.randn(3, 11, generator=gen)
    weights[:, :4] = 0.0  # a prompt: no gradient there
    weights[2] = 0.0  # a row with no advantage
    kept = {"where the loss has weight": weights != 0, "everywhere": None, "missing a position": weights != 0}[live]
    if kept is not None and live == "missing a position":
        kept[1, 6] = False
    results = []
    for compute in (lambda h, w, t: fused.target_logprobs(h, w, t, kept), _plain):
        hidden = torch.randn(3, 11, 16, generator=torch.Generator().manual_seed(1), requires_grad=True)
        lp = compute(hidden, head, targets)
        (torch.exp(lp) * weights).sum().backward()  # a ratio-shaped loss, as importance sampling
        results.append((lp.detach(), hidden.grad))
    (lp_fused, grad_fused), (lp_plain, grad_plain) = results
    # chunks against one matmul, logsumexp against cross_entropy: the head's 16-term dot products
    # and the softmax's 97-term sums in another order (numerics.py); the gradient runs them again
    rel = 2 * network_rel([16, 97])
    torch.testing.assert_close(lp_fused, lp_plain, rtol=0, atol=rel * float(lp_plain.abs().max()))
    torch.testing.assert_close(grad_fused, grad_plain, rtol=0, atol=2 * rel * float(grad_plain.abs().max()))
    assert grad_fused[2].abs().sum() == 0 and grad_fused[0, 0].abs().sum() == 0
    assert grad_fused[0, 5].abs().sum() > 0


def test_fused_head_only_where_the_model_is_head_after_body() -> None:
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2)  # fmt: skip
    model = LlamaForCausalLM(config)
    parts = fused.fused_parts(model)
    assert parts is not None and parts[0] is model.model and parts[1] is model.lm_head
    config.final_logit_softcapping = 30.0  # the model changes its logits after the head
    assert fused.fused_parts(model) is None
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=8, n_embd=16, n_layer=1, n_head=2))
    assert fused.fused_parts(gpt2) is None  # its body is not `.model`: the model's own logits
    with pytest.raises(ValueError, match="frozen"):
        fused.target_logprobs(torch.zeros(1, 2, 16), model.lm_head, torch.zeros(1, 2, dtype=torch.long))
