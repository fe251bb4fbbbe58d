"""How a forward_backward batch is cut into forward passes.

An RL batch is groups of replies to one prompt each: every row of a group starts with the same
prompt tokens. Running that prompt once per group and its KV cache under every reply (instead of
once per reply) is where most of a local step's compute goes otherwise: with a group of 8 and
replies shorter than the prompt, it cuts the tokens of a forward/backward several times. The
prompt runs once even when its replies take several passes (an agent's long prompt and tool
turns): only the replies count against a pass's budget. Rows whose prompts differ but begin
alike (a supervised batch: one environment's system prompt and tool schemas, then each example's
own task) share that common beginning the same way. Pure planning, no torch: the training client
executes the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MICROBATCH_TOKENS = 16384  # padded tokens per forward pass: bounds activation memory
LOGITS_BUDGET = 1 << 26  # float32 logits per forward pass (256 MB): fewer tokens for big vocabularies
# Bytes of activations a pass keeps for its backward, where the trainer gives their size (on a CPU,
# the machine's own memory): SmolLM2-135M's supervised passes of 1280 tokens held 3.2 GB, and passes
# of ~400 tokens took the same seconds a step (bench/README.md, step_memory.py).
ACTIVATIONS_BUDGET = 1 << 30
MIN_SHARED_PREFIX = 8  # shorter shared prefixes are cheaper to recompute than to cache
MAX_PADDING = 0.25  # a pass's padding at most this share of its real tokens: a long reply (an
# agent's extra turns) gets a pass of its own rather than padding every short one to its length


@dataclass(frozen=True)
class PromptGroup:
    """Rows that share their first `prefix` input tokens (0: none shared, each row runs whole),
    cut into forward passes of datum indices, longest first."""

    passes: list[list[int]]
    prefix: int = 0


def activation_bytes(hidden: int, intermediate: int, layers: int) -> int:
    """What one token's float32 activations kept for the backward take in a decoder, LoRA on every
    projection: about 12 hidden-sized and 9 MLP-sized tensors a layer (fitted to SmolLM2-135M's
    measured 2.5 MB a token; tiny-chat's 57 kB a token is under its 80 kB)."""
    return 4 * layers * (12 * hidden + 9 * intermediate)


def token_budget(vocab_size: int, token_bytes: int = 0) -> int:
    """Tokens a forward pass may run: its logits under LOGITS_BUDGET and, given `token_bytes` (a
    token's activations), those under ACTIVATIONS_BUDGET."""
    cap = ACTIVATIONS_BUDGET // token_bytes if token_bytes else MICROBATCH_TOKENS
    return max(1, min(MICROBATCH_TOKENS, LOGITS_BUDGET // vocab_size, cap))


def plan(
    tokens: Sequence[Sequence[int]], trained_from: Sequence[int], vocab_size: int, token_bytes: int = 0
) -> list[PromptGroup]:
    """Rows with the same tokens before their first trained position share that prefix, run once;
    each shared group is cut so that rows x longest reply stays under the token budget. Rows
    sharing nothing (or too little) are packed as before, longest first."""
    budget, lengths = token_budget(vocab_size, token_bytes), [len(ids) for ids in tokens]
    shared: dict[tuple[int, ...], list[int]] = {}
    alone: list[int] = []
    for i, (ids, start) in enumerate(zip(tokens, trained_from, strict=True)):
        prefix = min(start, len(ids) - 1)  # at least one token after the prefix
        if prefix >= MIN_SHARED_PREFIX:
            shared.setdefault(tuple(ids[:prefix]), []).append(i)
        else:
            alone.append(i)
    groups: list[PromptGroup] = []
    for key, rows in shared.items():
        if len(rows) == 1:
            alone.extend(rows)
            continue
        replies = [n - len(key) for n in lengths]
        groups.append(PromptGroup(_pack(rows, replies, budget), len(key)))
    alone = sorted(alone)
    for rows, prefix in _common_beginnings(alone, tokens, trained_from):
        replies = [n - prefix for n in lengths]
        groups.append(PromptGroup(_pack(rows, replies, budget), prefix))
        alone = [i for i in alone if i not in rows]
    if alone:
        groups.append(PromptGroup(_pack(alone, lengths, budget)))
    return groups


def _common_beginnings(
    rows: list[int], tokens: Sequence[Sequence[int]], trained_from: Sequence[int]
) -> list[tuple[list[int], int]]:
    """Rows (of those whose prompts differ) that begin with the same MIN_SHARED_PREFIX tokens, each
    set with the length of the prefix all of its rows share before their first trained token."""
    by_start: dict[tuple[int, ...], list[int]] = {}
    for i in rows:
        if min(trained_from[i], len(tokens[i]) - 1) >= MIN_SHARED_PREFIX:
            by_start.setdefault(tuple(tokens[i][:MIN_SHARED_PREFIX]), []).append(i)
    out = []
    for members in by_start.values():
        if len(members) < 2:
            continue
        limit = min(min(trained_from[i], len(tokens[i]) - 1) for i in members)
        first = tokens[members[0]]
        prefix = next(
            (k for k in range(limit) if any(tokens[i][k] != first[k] for i in members[1:])),
            limit,
        )
        if prefix >= MIN_SHARED_PREFIX:
            out.append((members, prefix))
    return out


def _pack(rows: list[int], lengths: list[int], budget: int) -> list[list[int]]:
    """`rows` grouped, longest first, so that each group's padded size stays under `budget` and
    its padding under MAX_PADDING of its real tokens."""
    groups: list[list[int]] = []
    real = 0
    for i in sorted(rows, key=lambda i: -lengths[i]):
        padded = (len(groups[-1]) + 1) * lengths[groups[-1][0]] if groups else 0
        if groups and padded <= budget and padded <= (1 + MAX_PADDING) * (real + lengths[i]):
            groups[-1].append(i)
            real += lengths[i]
        else:
            groups.append([i])
            real = lengths[i]
    return groups


def first_trained(weights: Sequence[float]) -> int:
    """The first position whose loss counts (its weight or advantage is non-zero)."""
    return next((i for i, w in enumerate(weights) if w != 0), len(weights))
