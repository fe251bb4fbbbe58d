"""An environment's rollouts as its process reports them (env_health.json): the latest exception,
the groups it discarded, its model requests; and when a run (or rl_test_inference) whose
environment only raises or only discards is to end rather than wait for a group forever."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_mcp.settings import EnvLimits

SHORT_REPLY_CHARS = 40  # about 10 tokens: Atropos' text_reversal and gsm8k drop shorter replies
QUOTED_REPLIES = 3
QUOTED_CHARS = 160


@dataclass(frozen=True)
class EnvError:
    """The environment's latest exception in `collect_trajectories`, and how it stands."""

    type: str
    message: str
    where: str
    at: float
    errors: int  # exceptions so far
    groups_scored: int  # groups scored so far
    last_group_at: float | None

    @property
    def line(self) -> str:
        return f"{self.type}: {self.message} (at {self.where})"


@dataclass(frozen=True)
class Discards:
    """Rollouts that returned no group and raised nothing; the latest one's replies and scores."""

    groups_discarded: int
    in_a_row: int  # since the last scored group
    groups_scored: int  # groups scored so far
    last_group_at: float | None
    at: float  # the latest
    sample_replies: list[str]
    scores: list[float] | None  # what the environment recorded meanwhile (None: it keeps no such list)
    too_long: tuple[int, int] | None = None  # (longest sequence, the trainer's limit): skipped by atroposlib

    @property
    def equal_scores(self) -> bool:
        return bool(self.scores) and len(set(self.scores or ())) == 1

    @property
    def short_replies(self) -> bool:
        short = sum(len(r.strip()) < SHORT_REPLY_CHARS for r in self.sample_replies)
        return bool(self.sample_replies) and short * 2 >= len(self.sample_replies)

    @property
    def likely_cause(self) -> str | None:
        """The cause its scores or replies show, if any."""
        if self.too_long:
            return "sequences too long"
        return "equal scores" if self.equal_scores else "replies too short" if self.short_replies else None

    @property
    def usual_causes(self) -> list[str]:
        """What usually makes an environment discard a group, the ones its replies and scores show first."""
        equal = "equal scores: the environment skips a group whose replies all score the same (as Atropos' own do)"
        short = "replies too short: environments drop replies under about 10 tokens"
        parse = "parse failures: no answer in the format the environment reads"
        seen = []
        if self.too_long:
            longest, limit = self.too_long
            seen.append(
                f"sequences too long: {longest} tokens, where the trainer takes fewer than {limit} "
                "(max_token_trainer_length), so atroposlib skips the group: raise max_token_trainer_length (a "
                "profile may lock it: then use one that allows more), or shorten the prompt or the replies "
                "(max_token_length, max_completion_tokens)"
            )
        if self.equal_scores and self.scores:
            seen.append(f"{equal}; here every reply scored {self.scores[0]:g}")
        if self.short_replies:
            seen.append(f"{short}; here most replies are under {SHORT_REPLY_CHARS} characters")
        others = [c for c, shown in ((equal, self.equal_scores), (short, self.short_replies)) if not shown]
        return [*seen, *others, parse]

    @property
    def line(self) -> str:
        scores = f"scores {self.scores}" if self.scores else "scores not visible"
        quoted = "; ".join(repr(r[:QUOTED_CHARS]) for r in self.sample_replies[:QUOTED_REPLIES]) or "none captured"
        return (
            f"{self.in_a_row} groups discarded in a row ({self.groups_discarded} in all, {self.groups_scored} scored); "
            f"the latest: {scores}; sample replies: {quoted}. What usually causes it: {'; '.join(self.usual_causes)}"
        )


@dataclass(frozen=True)
class AtCap:
    """The latest request whose replies ended at their token cap (finish_reason 'length')."""

    asked: int | None  # the max_tokens it asked for (None: the server's default)
    prompt_tokens: int | None
    reply_tokens: int | None  # per reply
    at: float


@dataclass(frozen=True)
class Requests:
    """The environment's model requests so far; each try of a request atroposlib retries counts."""

    sent: int = 0
    answered: int = 0
    timeouts: int = 0
    failed: int = 0
    client_retries: int = 0
    client_retry_causes: dict[str, int] = field(default_factory=dict)  # timeout, connection ERROR, status N
    client_timeout_s: float | None = None
    client_timeout_basis: str | None = None  # how it was derived (tinker_atropos/request_timeouts.py)
    seconds_per_token: float | None = None  # a reply token's measured time at the rows the run schedules
    max_asked: int | None = None  # the most tokens a request asked for
    in_flight: int = 0
    oldest_in_flight_at: float | None = None
    last_timeout_at: float | None = None
    replies: int = 0
    replies_at_cap: int = 0
    reply_tokens: int = 0
    last_at_cap: AtCap | None = None

    @property
    def retries_after_timeout(self) -> int:
        """The client's retries that followed a timeout (all of them, in a file that kept no causes)."""
        return self.client_retry_causes.get("timeout", 0) if self.client_retry_causes else self.client_retries


@dataclass(frozen=True)
class EnvHealth:
    groups: int
    error: EnvError | None
    discards: Discards | None  # None: it discarded none
    requests: Requests


def read_health(path: Path) -> EnvHealth | None:
    """What `path` says, or None (no file yet, or not one the environment process wrote)."""
    try:
        health = json.loads(path.read_text())
        return EnvHealth(
            groups=int(health["groups"]),
            error=_error(health),
            discards=_discards(health),
            requests=_requests(health.get("requests")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _error(health: dict[str, Any]) -> EnvError | None:
    last = health["last_error"]
    if not last:
        return None
    return EnvError(
        type=str(last["type"]),
        message=str(last["message"]),
        where=str(last["where"]),
        at=float(last["at"]),
        errors=int(health["errors"]),
        groups_scored=int(health["groups"]),
        last_group_at=health.get("last_group_at"),
    )


def _discards(health: dict[str, Any]) -> Discards | None:
    last = health.get("last_discard")
    if not last:
        return None
    scores = last.get("scores")
    return Discards(
        groups_discarded=int(health["discarded"]),
        in_a_row=int(health["discarded_in_a_row"]),
        groups_scored=int(health["groups"]),
        last_group_at=health.get("last_group_at"),
        at=float(last["at"]),
        sample_replies=[str(r) for r in last.get("replies") or []],
        scores=[float(s) for s in scores] if isinstance(scores, list) else None,
        too_long=(int(last["too_long"]["longest"]), int(last["too_long"]["limit"])) if last.get("too_long") else None,
    )


def _requests(raw: Any) -> Requests:
    if not isinstance(raw, dict):
        return Requests()
    known = {k: v for k, v in raw.items() if k in Requests.__dataclass_fields__ and k != "last_at_cap"}
    causes = raw.get("client_retry_causes")
    known["client_retry_causes"] = (
        {str(k): int(v) for k, v in causes.items() if isinstance(v, int)} if isinstance(causes, dict) else {}
    )
    cap = raw.get("last_at_cap")
    at_cap = (
        AtCap(cap.get("asked"), cap.get("prompt_tokens"), cap.get("reply_tokens"), float(cap["at"])) if cap else None
    )
    return Requests(**known, last_at_cap=at_cap)


def latest_error(path: Path) -> EnvError | None:
    """The latest exception recorded in `path`, or None (no file yet, or no exception)."""
    health = read_health(path)
    return health.error if health else None


def raising(health: EnvHealth, running_since: float, timeout_s: float, now: float) -> str | None:
    """Why to end a run or test whose environment has raised and scored no group for `timeout_s`, else None."""
    error = health.error
    if error is None:
        return None
    quiet_since = max(error.last_group_at or 0.0, running_since)
    if now - quiet_since < timeout_s or error.at < quiet_since:
        return None
    return (
        f"the environment scored no group for {timeout_s:.0f} s while its rollouts raised "
        f"({error.errors} exceptions, {error.groups_scored} groups scored in all); the latest: {error.line}. "
        "Fix the environment and try again"
    )


def discarding(health: EnvHealth, running_since: float, limits: EnvLimits, now: float) -> str | None:
    """Why to stop rl_test_inference's bounded wait on an environment that discarded every group since
    it last scored one (`limits.discard_groups` in a row, or for `limits.discard_timeout_s`), else None."""
    d = health.discards
    if d is None or d.in_a_row == 0:
        return None
    quiet_s = now - max(d.last_group_at or 0.0, running_since)
    if d.in_a_row < limits.discard_groups and quiet_s < limits.discard_timeout_s:
        return None
    return (
        f"the environment discarded every group for {quiet_s:.0f} s: its rollouts returned no group and "
        f"raised nothing. {d.line}"
    )


def run_discarding(health: EnvHealth, running_since: float, limits: EnvLimits, now: float) -> str | None:
    """Why to end a run whose environment discards every group, on evidence, else None: at least
    `limits.discard_groups` in a row *and* for as long as that many of its groups take (its measured
    seconds a group, at least `limits.discard_timeout_s`); or for `limits.discard_hard_limit_s` alone.
    Two all-equal groups in a row are ordinary for a small model; a slow environment's 120 s are two."""
    d = health.discards
    if d is None or d.in_a_row == 0:
        return None
    quiet_s = now - max(d.last_group_at or 0.0, running_since)
    per_group = max(0.0, d.at - running_since) / max(1, d.groups_scored + d.groups_discarded)
    needed_s = max(limits.discard_timeout_s, limits.discard_groups * per_group)
    if quiet_s < limits.discard_hard_limit_s and (d.in_a_row < limits.discard_groups or quiet_s < needed_s):
        return None
    return (
        f"the environment discarded every group for {quiet_s:.0f} s ({d.in_a_row} in a row, about "
        f"{per_group:.0f} s a group): its rollouts returned no group and raised nothing. {d.line}"
    )


def stalled(path: Path, running_since: float | None, limits: EnvLimits, now: float | None = None) -> str | None:
    """The failure of a run (running since `running_since`) whose environment only raises or only
    discards (`limits`), else None."""
    health = read_health(path)
    if health is None or running_since is None:
        return None
    at = time.time() if now is None else now
    return raising(health, running_since, limits.error_timeout_s, at) or run_discarding(
        health, running_since, limits, at
    )
