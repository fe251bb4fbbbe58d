"""Atropos ScoredDataGroups -> `tinker.types.Datum`s for an importance-sampling step.

A group (one dict of atroposlib's `GET /batch` list) holds `group_size` sequences of one prompt:

- `tokens[i]`: prompt + completion token ids.
- `masks[i]`: aligned with `tokens[i]`; -100 on prompt positions, the token id on completion
  positions (atroposlib's ManagedServer and `tokenize_for_trainer` both write it so).
- `inference_logprobs[i]` (optional): aligned with `tokens[i]`; the sampler's logprob of each
  completion token, a placeholder (1.0) on prompt positions. An empty list: this sequence was not
  sampled (an agent environment's demonstration), and the trainer scores it with its sampler.
- `scores[i]`: the sequence's reward.
- `advantages[i]` (optional): per-token advantages the environment computed itself, aligned with
  `tokens[i]`; when present they replace `score - group mean`.
- `overrides[i]` (optional dict): `set_advantage_to_zero: true` removes the sequence from the
  gradient (atroposlib's example trainer convention); `correct: bool` reports correctness.
- `group_overrides` (optional dict): `set_advantage_to_zero: true` applies to every sequence.

Each sequence becomes one Datum: `model_input = tokens[:-1]`, `target_tokens = tokens[1:]`,
`logprobs` = the sampler logprob of each target (0 on prompt targets), `advantages` = the
sequence's advantage on completion targets and 0 on prompt targets. Groups whose advantages are
all zero carry no signal and are skipped. The work per sequence is numpy array arithmetic; no
Python loop runs over tokens.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tinker import types

logger = logging.getLogger(__name__)

PROMPT_MASK = -100
GROUP_STD_EPS = 1e-4  # as TRL: a group of near-equal scores keeps a bounded advantage


@dataclass
class BatchConversion:
    """Datums for one training step plus the batch statistics the metrics line reports.

    - `reward_mean` / `reward_std`: over the scores of every sequence in the batch, skipped
      groups included (what the policy earned this step).
    - `advantage_mean` / `advantage_std`: over the trained sequences, one value per sequence
      (its mean advantage over completion tokens).
    - `percent_correct`: the fraction of sequences whose `overrides[i]["correct"]` is true, among
      the sequences that report it; None when no sequence of the batch reports correctness.
    - `agent_turns_mean` / `agent_tool_calls_mean` (per rollout) and `agent_tool_errors` (total):
      from the `turns`, `tool_calls`, `tool_errors` keys of `overrides[i]` that agentic
      environments report; None when no sequence of the batch reports them.
    - `env_metrics`: the mean of each metric the environment reports per rollout in
      `overrides[i]["env_metrics"]` (a verifiers rubric's metrics); None when none does.
    - `num_sequences`: sequences received; `tokens`: tokens in the trained sequences.
    - `skipped_groups`: groups with all-zero advantages (trained all the same with `keep_tied`);
      `invalid_groups`: malformed groups (mismatched lengths), dropped with a warning so one bad group cannot end a run.
    - `groups`: well-formed groups; `distinct_reply_share`: the mean over groups of distinct
      completions / completions (1.0: every reply differs; near 1/group_size: collapsed).
    - `token_entropy`: the mean negative sampler logprob over the completion tokens of every
      group that came with them (skipped groups too): a free estimate of the policy's entropy per
      token, exact in expectation at temperature 1. It falls toward 0 as replies collapse, also
      where replies are too long to repeat exactly; None when no group sent sampler logprobs.
    - `completion_masks[k]`: bool per target of `datums[k]` (True = completion token).
    - `missing_logprobs`: indices of datums whose group came without `inference_logprobs`; the
      trainer must fill them (see `with_sampler_logprobs`) before an importance-sampling step.
    """

    datums: list[types.Datum] = field(default_factory=list)
    completion_masks: list[np.ndarray] = field(default_factory=list)
    missing_logprobs: list[int] = field(default_factory=list)
    reward_mean: float = 0.0
    reward_std: float = 0.0
    advantage_mean: float = 0.0
    advantage_std: float = 0.0
    percent_correct: float | None = None
    agent_turns_mean: float | None = None
    agent_tool_calls_mean: float | None = None
    agent_tool_errors: int | None = None
    env_metrics: dict[str, float] | None = None
    num_sequences: int = 0
    tokens: int = 0
    skipped_groups: int = 0
    invalid_groups: int = 0
    groups: int = 0
    distinct_reply_share: float | None = None
    token_entropy: float | None = None

    @property
    def completion_tokens(self) -> int:
        return int(sum(int(m.sum()) for m in self.completion_masks))


def groups_to_datums(
    groups: list[dict[str, Any]], advantage_scale: str = "none", *, keep_tied: bool = False
) -> BatchConversion:
    """Convert one `GET /batch` payload (a list of ScoredDataGroup dicts) into Datums.

    `keep_tied`: groups whose scores all tie are trained too (a teacher's signal has no need of the
    reward's); they still count in `skipped_groups`, and sequences set to zero stay out.

    `advantage_scale`: "none" (score minus the group mean), "group" (divided by the group's standard
    deviation too) or "batch" (by the batch's); advantages an environment sent itself are used as they are."""
    out = BatchConversion()
    batch_std = _batch_std(groups) if advantage_scale == "batch" else None
    scores_all: list[np.ndarray] = []
    seq_advantages: list[float] = []
    correct_flags: list[bool] = []
    agent: dict[str, list[float]] = {"turns": [], "tool_calls": [], "tool_errors": []}
    env_metrics: dict[str, list[float]] = {}
    distinct: list[float] = []
    nll_sum, nll_tokens = 0.0, 0  # negative sampler logprobs of completion tokens, and their count

    for g_index, group in enumerate(groups):
        try:
            rows = _group_rows(group, advantage_scale, batch_std)
        except ValueError as exc:
            out.invalid_groups += 1
            logger.warning("dropping malformed group %d of the batch: %s", g_index, exc)
            continue
        out.groups += 1
        replies = {tuple(t for t, m in zip(r.tokens, r.masks) if m != PROMPT_MASK) for r in rows}
        distinct.append(len(replies) / len(rows))
        for row in rows:
            total, count = _completion_nll(row)
            nll_sum, nll_tokens = nll_sum + total, nll_tokens + count
        scores = np.asarray(group["scores"], dtype=np.float64)
        scores_all.append(scores)
        out.num_sequences += len(scores)
        correct_flags.extend(_correct_flags(group.get("overrides"), len(scores)))
        for o in _per_item(group.get("overrides"), len(scores)):
            for key, values in agent.items():
                if isinstance(o.get(key), (int, float)):
                    values.append(float(o[key]))
            reported = o.get("env_metrics")
            for name, value in reported.items() if isinstance(reported, dict) else ():
                if isinstance(value, (int, float)):
                    env_metrics.setdefault(str(name), []).append(float(value))

        built = [_sequence(row) for row in rows]
        if not any(b is not None and b.has_signal for b in built):
            out.skipped_groups += 1
            if not keep_tied:
                continue
        for b in built:
            if b is None or (keep_tied and b.zeroed):
                continue
            if b.sampler_logprobs is None:
                out.missing_logprobs.append(len(out.datums))
            out.datums.append(b.datum())
            out.completion_masks.append(b.completion)
            out.tokens += len(b.tokens)
            seq_advantages.append(b.mean_advantage)

    if scores_all:
        rewards = np.concatenate(scores_all)
        out.reward_mean, out.reward_std = float(rewards.mean()), float(rewards.std())
    if seq_advantages:
        adv = np.asarray(seq_advantages)
        out.advantage_mean, out.advantage_std = float(adv.mean()), float(adv.std())
    if correct_flags:
        out.percent_correct = float(np.mean(correct_flags))
    if distinct:
        out.distinct_reply_share = float(np.mean(distinct))
    if nll_tokens:
        out.token_entropy = nll_sum / nll_tokens
    if agent["turns"]:
        out.agent_turns_mean = float(np.mean(agent["turns"]))
    if agent["tool_calls"]:
        out.agent_tool_calls_mean = float(np.mean(agent["tool_calls"]))
    if agent["tool_errors"]:
        out.agent_tool_errors = int(sum(agent["tool_errors"]))
    if env_metrics:
        out.env_metrics = {name: round(float(np.mean(values)), 6) for name, values in sorted(env_metrics.items())}
    return out


def with_sampler_logprobs(datum: types.Datum, logprobs: np.ndarray) -> types.Datum:
    """A copy of `datum` whose `logprobs` (aligned with its targets) are `logprobs`."""
    inputs = dict(datum.loss_fn_inputs)
    inputs["logprobs"] = types.TensorData.from_numpy(np.asarray(logprobs, dtype=np.float32))
    return types.Datum(model_input=datum.model_input, loss_fn_inputs=inputs)


@dataclass
class _Row:
    tokens: list[int]
    masks: list[int]
    logprobs: list[float] | None
    score_advantage: float
    token_advantages: list[float] | None
    zeroed: bool


@dataclass
class _Sequence:
    tokens: list[int]
    completion: np.ndarray  # bool per target
    sampler_logprobs: np.ndarray | None  # float32 per target
    advantages: np.ndarray  # float32 per target
    zeroed: bool = False  # set_advantage_to_zero: out of the gradient

    @property
    def has_signal(self) -> bool:
        return bool(np.any(self.advantages != 0.0))

    @property
    def mean_advantage(self) -> float:
        n = int(self.completion.sum())
        return float(self.advantages.sum() / n) if n else 0.0

    def datum(self) -> types.Datum:
        logprobs = self.sampler_logprobs
        if logprobs is None:
            logprobs = np.zeros(len(self.completion), dtype=np.float32)
        return types.Datum(
            model_input=types.ModelInput.from_ints(self.tokens[:-1]),
            loss_fn_inputs={
                "target_tokens": types.TensorData.from_numpy(np.asarray(self.tokens[1:], dtype=np.int64)),
                "logprobs": types.TensorData.from_numpy(logprobs),
                "advantages": types.TensorData.from_numpy(self.advantages),
            },
        )


def _batch_std(groups: list[dict[str, Any]]) -> float:
    """The standard deviation of every score in the batch (TRL's `scale_rewards="batch"`)."""
    scores = [float(s) for g in groups if isinstance(g.get("scores"), list) for s in g["scores"]]
    return float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0


def _group_rows(group: dict[str, Any], advantage_scale: str, batch_std: float | None = None) -> list[_Row]:
    """Validate one group and pair each sequence with its advantage source."""
    tokens, masks, scores = group.get("tokens"), group.get("masks"), group.get("scores")
    if not tokens or masks is None or scores is None:
        raise ValueError("tokens, masks and scores are required")
    n = len(tokens)
    if len(masks) != n or len(scores) != n:
        raise ValueError(f"{n} token lists but {len(masks)} masks and {len(scores)} scores")
    logprobs = group.get("inference_logprobs") or None
    if logprobs is not None and len(logprobs) != n:
        raise ValueError(f"{n} token lists but {len(logprobs)} inference_logprobs lists")
    token_adv = group.get("advantages") or None
    if token_adv is not None and len(token_adv) != n:
        raise ValueError(f"{n} token lists but {len(token_adv)} advantages lists")
    for i in range(n):
        if len(masks[i]) != len(tokens[i]):
            raise ValueError(f"sequence {i}: {len(tokens[i])} tokens but {len(masks[i])} masks")
        if logprobs is not None and logprobs[i] and len(logprobs[i]) != len(tokens[i]):
            raise ValueError(f"sequence {i}: {len(tokens[i])} tokens but {len(logprobs[i])} inference_logprobs")
        if token_adv is not None and len(token_adv[i]) != len(tokens[i]):
            raise ValueError(f"sequence {i}: {len(tokens[i])} tokens but {len(token_adv[i])} advantages")

    score_arr = np.asarray(scores, dtype=np.float64)
    centred = score_arr - score_arr.mean()
    if advantage_scale == "group" and n > 1:
        centred /= score_arr.std(ddof=1) + GROUP_STD_EPS
    elif advantage_scale == "batch" and batch_std is not None:
        centred /= batch_std + GROUP_STD_EPS
    group_zero = bool((group.get("group_overrides") or {}).get("set_advantage_to_zero", False))
    overrides = _per_item(group.get("overrides"), n)
    return [
        _Row(
            tokens=tokens[i],
            masks=masks[i],
            logprobs=logprobs[i] if logprobs is not None and logprobs[i] else None,
            score_advantage=float(centred[i]),
            token_advantages=None if token_adv is None else token_adv[i],
            zeroed=group_zero or bool(overrides[i].get("set_advantage_to_zero", False)),
        )
        for i in range(n)
    ]


def _sequence(row: _Row) -> _Sequence | None:
    """Shift one sequence onto its targets; None when it has no target at all."""
    if len(row.tokens) < 2:
        return None
    completion = np.asarray(row.masks[1:]) != PROMPT_MASK
    if row.zeroed:
        advantages = np.zeros(len(completion), dtype=np.float32)
    elif row.token_advantages is not None:
        advantages = np.where(completion, np.asarray(row.token_advantages[1:], np.float32), 0.0)
    else:
        advantages = np.where(completion, np.float32(row.score_advantage), np.float32(0.0))
    sampler = None
    if row.logprobs is not None:
        sampler = np.where(completion, np.asarray(row.logprobs[1:], np.float32), 0.0)
        sampler = sampler.astype(np.float32, copy=False)
    return _Sequence(
        tokens=row.tokens,
        completion=completion,
        sampler_logprobs=sampler,
        advantages=advantages.astype(np.float32, copy=False),
        zeroed=row.zeroed,
    )


def _completion_nll(row: _Row) -> tuple[float, int]:
    """The summed negative sampler logprob of the row's completion tokens and their count (0, 0 without logprobs)."""
    if row.logprobs is None:
        return 0.0, 0
    completion = np.asarray(row.masks) != PROMPT_MASK
    return -float(np.asarray(row.logprobs, np.float64)[completion].sum()), int(completion.sum())


def _per_item(overrides: Any, n: int) -> list[dict[str, Any]]:
    """Per-sequence override dicts; an absent or misshapen list means no overrides."""
    if isinstance(overrides, list) and len(overrides) == n:
        return [o if isinstance(o, dict) else {} for o in overrides]
    return [{} for _ in range(n)]


def _correct_flags(overrides: Any, n: int) -> list[bool]:
    return [bool(o["correct"]) for o in _per_item(overrides, n) if "correct" in o]
