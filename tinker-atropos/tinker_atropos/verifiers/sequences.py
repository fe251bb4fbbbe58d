"""A verifiers rollout's model turns as one training sequence (pure).

Each turn carries the exact prompt ids the server rendered and the completion ids it sampled, with
their logprobs. While a turn's prompt starts with everything before it (the previous prompt and
reply), the turns are one sequence: the new prompt tokens (tool results, user turns, the template's
scaffolding) are masked, the replies are not. Our inference server keeps that prefix property
(inference_server/conversations.py); a server that re-renders a conversation differently breaks
it, and then the sequence restarts at that turn's prompt, in which the earlier replies are text
the model did not sample: they are not trained (atroposlib wants one sequence per rollout).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PROMPT_MASK = -100  # atroposlib's mask of a token that is not trained (batches.py)
PROMPT_LOGPROB = 1.0  # atroposlib's placeholder logprob of such a token


@dataclass
class Sequence:
    """Token ids, atroposlib masks (the token id where trained) and sampler logprobs, aligned."""

    tokens: list[int] = field(default_factory=list)
    masks: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def extend(self, ids: list[int], trained: bool, logprobs: list[float] | None = None) -> None:
        self.tokens += ids
        self.masks += list(ids) if trained else [PROMPT_MASK] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [PROMPT_LOGPROB] * len(ids)


def sequence(turns: list[dict[str, Any]]) -> tuple[Sequence, int]:
    """The sequence of one rollout's turns (`prompt_ids`, `completion_ids`, `completion_logprobs`),
    and how many of its replies are left untrained because a later prompt did not extend them."""
    seq, replies, untrained = Sequence(), 0, 0
    for turn in turns:
        prompt, reply = list(turn["prompt_ids"]), list(turn["completion_ids"])
        logprobs = turn.get("completion_logprobs")
        if logprobs is None or len(logprobs) != len(reply):
            raise ValueError(f"a turn has {len(reply)} reply tokens but {len(logprobs or [])} logprobs")
        if prompt[: len(seq.tokens)] != seq.tokens:
            seq, replies, untrained = Sequence(), 0, untrained + replies
        seq.extend(prompt[len(seq.tokens) :], trained=False)
        seq.extend(reply, trained=True, logprobs=[float(x) for x in logprobs])
        replies += 1
    return seq, untrained


def from_branch(token_ids: list[int], sampled_mask: list[bool], logprobs: list[float]) -> Sequence:
    """A verifiers-v1 trace's branch (already one sequence, True where the model sampled) as ours."""
    if not len(token_ids) == len(sampled_mask) == len(logprobs):
        raise ValueError(f"a branch has {len(token_ids)} tokens, {len(sampled_mask)} mask and {len(logprobs)} logprobs")
    seq = Sequence()
    for token, sampled, logprob in zip(token_ids, sampled_mask, logprobs, strict=True):
        seq.extend([token], trained=sampled, logprobs=[float(logprob)] if sampled else None)
    return seq


def from_text(prompt_ids: list[int], reply_ids: list[int]) -> Sequence:
    """A rollout whose server sent no token ids, re-tokenized from its text: no sampler logprobs (an
    empty list, which the trainer fills with its own sampler's: batches.py), never placeholders that
    would read as the policy's."""
    seq = Sequence()
    seq.extend(prompt_ids, trained=False)
    seq.extend(reply_ids, trained=True)
    seq.logprobs = []
    return seq
