"""An episode's training sequences from what the inference server sampled for its key
(`inference_server/episode_log.py`), never from its text: Hermes' messages are not re-tokenized.

The calls of an episode, in the order they started, build sequences as the agent loop's phase 2 builds
its one (`agent/loop.py:TokenTrace`): a call whose prompt starts with the sequence so far (the previous
prompt and the reply as it was returned) extends it, the new prompt ids as context (mask -100,
logprob 1.0) and the sampled ids as the model's (mask = the id, its sampler logprob); a call whose
prompt does not (the client rewrote its history, compressed its context) starts a new sequence. Ids
sampled past a stop string that cut the reply are trained only where a sequence ends with them. A
cancelled call (its client gone before the reply was whole) is left out: no later prompt holds it.

An episode whose records cannot be matched is refused with its reason, for the caller to leave out
and count, never guessed: no calls, a call with n != 1, a reply with no sampled id. Calls sampled by
different weights (a swap mid-episode, which long episodes meet while the trainer steps) are kept: each
id carries the logprob of the weights that drew it, which is what the loss's importance ratio needs;
`swapped` says so, for a metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from tinker_atropos.agent.loop import TokenTrace

CANCELLED = "cancelled"  # episode_log.CANCELLED: a call whose client went away
# why an episode's records cannot be trained (EpisodeSequences.refused)
NO_CALLS = "no_calls"
MANY_CHOICES = "n_not_1"
EMPTY_COMPLETION = "empty_completion"


class EpisodeEvicted(RuntimeError):
    """The server dropped the episode's records to stay in its memory bound before they were taken."""

    reason = "evicted"


@dataclass(frozen=True)
class EpisodeChoice:
    """One sampled reply: every id the sampler drew, their logprobs, how many of them the reply the
    client got was made from (the rest lie past a stop string), and the finish reason it was told."""

    completion_ids: list[int]
    logprobs: list[float]
    returned_tokens: int
    finish_reason: str


@dataclass(frozen=True)
class EpisodeCall:
    """One request of the episode, as the server recorded it."""

    index: int  # the server's start order
    endpoint: str  # "chat" | "completions"
    streamed: bool
    prompt_ids: list[int]
    choices: list[EpisodeChoice]
    weights_version: int  # the sampler's version: a swap between two calls changes it
    weights_label: str | None = None
    weights_path: str | None = None

    @property
    def n(self) -> int:
        return len(self.choices)

    @property
    def cancelled(self) -> bool:
        return bool(self.choices) and all(c.finish_reason == CANCELLED for c in self.choices)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> EpisodeCall:
        """A record of `GET /episodes/{key}`; a misshapen one is a ValueError naming its field."""
        try:
            weights = record["weights"]
            choices = [
                EpisodeChoice(
                    [int(t) for t in c["completion_ids"]],
                    [float(x) for x in c["logprobs"]],
                    int(c["returned_tokens"]),
                    str(c["finish_reason"]),
                )
                for c in record["choices"]
            ]
            call = cls(
                index=int(record["index"]),
                endpoint=str(record["endpoint"]),
                streamed=bool(record["streamed"]),
                prompt_ids=[int(t) for t in record["prompt_ids"]],
                choices=choices,
                weights_version=int(weights["version"]),
                weights_label=weights.get("label"),
                weights_path=weights.get("path"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"an episode record is misshapen ({type(exc).__name__}: {exc}): {str(record)[:200]}"
            ) from exc
        for c in choices:
            if len(c.logprobs) != len(c.completion_ids) or not 0 <= c.returned_tokens <= len(c.completion_ids):
                raise ValueError(
                    f"episode call {call.index}: {len(c.completion_ids)} completion ids, {len(c.logprobs)} logprobs, "
                    f"returned_tokens {c.returned_tokens}"
                )
        return call


def _root(base_url: str) -> str:
    """The server's root from its URL as given to it or to a client (`.../v1` is the OpenAI API's)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


async def take_episode(client: httpx.AsyncClient, base_url: str, key: str) -> list[EpisodeCall]:
    """The calls the server at `base_url` recorded under `key`, then dropped there. Raises
    EpisodeEvicted where the server let them go for room; an HTTP error as httpx's."""
    url = f"{_root(base_url)}/episodes/{key}"
    got = await client.get(url)
    got.raise_for_status()
    body = got.json()
    (await client.delete(url)).raise_for_status()
    if body.get("evicted"):
        raise EpisodeEvicted(
            f"the inference server dropped the records of {key} to stay in its memory bound before they were "
            "taken: take each episode's records as soon as it ends, or run fewer episodes at once"
        )
    return [EpisodeCall.from_record(record) for record in body["calls"]]


@dataclass(frozen=True)
class EpisodeSequences:
    """An episode's sequences (TokenTrace: tokens, masks, logprobs, as a ScoredDataGroup entry holds
    them), or, with `refused` set, none and why (`detail` in words)."""

    sequences: list[TokenTrace] = field(default_factory=list)
    refused: str | None = None
    detail: str = ""
    calls: int = 0  # calls trained
    cancelled_calls: int = 0  # calls left out, their client gone
    swapped: bool = False  # its calls were sampled by more than one version of the weights

    @property
    def merged(self) -> bool:
        """Every call in one sequence (the metric: an episode's prompts each extended the last)."""
        return self.refused is None and len(self.sequences) == 1


def _refused(reason: str, detail: str, cancelled: int) -> EpisodeSequences:
    return EpisodeSequences(refused=reason, detail=detail, cancelled_calls=cancelled)


def episode_sequences(calls: list[EpisodeCall]) -> EpisodeSequences:
    """The episode's training sequences (see the module's docstring), or why it has none."""
    usable = sorted((c for c in calls if not c.cancelled), key=lambda c: c.index)
    cancelled = len(calls) - len(usable)
    if not usable:
        return _refused(NO_CALLS, f"no call was recorded ({cancelled} cancelled)", cancelled)
    for call in usable:
        if call.n != 1:
            return _refused(
                MANY_CHOICES, f"call {call.index} sampled n={call.n} replies: one sequence needs n=1", cancelled
            )
        if not call.choices[0].completion_ids:
            return _refused(EMPTY_COMPLETION, f"call {call.index} sampled no token", cancelled)

    sequences: list[TokenTrace] = []
    trace: TokenTrace | None = None
    past_stop: tuple[list[int], list[float]] = ([], [])  # the last reply's ids past a stop string
    for call in usable:
        prompt, choice = call.prompt_ids, call.choices[0]
        if trace is not None and prompt[: len(trace)] == trace.tokens:
            trace.add_context(prompt[len(trace) :])
        else:
            if trace is not None:
                trace.add_sampled(*past_stop)
                sequences.append(trace)
            trace = TokenTrace()
            trace.add_context(prompt)
        kept = choice.returned_tokens
        trace.add_sampled(choice.completion_ids[:kept], choice.logprobs[:kept])
        past_stop = (choice.completion_ids[kept:], choice.logprobs[kept:])
    assert trace is not None
    trace.add_sampled(*past_stop)
    sequences.append(trace)
    swapped = len({c.weights_version for c in usable}) > 1
    return EpisodeSequences(sequences, calls=len(usable), cancelled_calls=cancelled, swapped=swapped)
