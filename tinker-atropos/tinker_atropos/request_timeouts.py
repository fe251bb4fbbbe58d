"""An environment's request timeout, derived from the work the run schedules on the product's own
inference server rather than fixed.

A fixed timeout (atroposlib's `timeout`, 120 s in the profiles) says nothing about the work behind
it: a reply of R tokens takes R decode steps, and on this machine a step takes as long as the batch
the run schedules makes it (group_size rows per group, several groups at once, the trainer beside
them). A request that outlives its timeout is tried again from nothing, so a run whose replies cannot
fit makes no step at all. Here each request's timeout is

    margin x R x (the server's measured seconds per decode step at the rows the run schedules)
    + a prefill allowance,

at least the environment's own timeout and at most a ceiling; where even the ceiling cannot hold R
tokens, the request asks for the tokens that fit instead. The measurement is the server's own
(`/health`'s `decoding`, `backends/local/decode_clock.py`): until it has timed a decode step, the
environment's own timeout applies. Its group timeout (atroposlib's `worker_timeout`) is raised to
hold its agent turns at that timeout.

The policy comes from the run config's `request_timeouts` section (written by the MCP server); the
environment process applies it (`timeout_fitter.py`). Stdlib only: the MCP server writes the policy
and its diagnosis reads the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tinker_atropos.reply_cap import ReplyCap

SECTION = "request_timeouts"  # the run config's section
DEFAULT_REPLY_TOKENS = 2048  # atroposlib's max_token_length default


@dataclass(frozen=True)
class Policy:
    """The run config's `request_timeouts`: how a timeout is derived."""

    margin: float = 2.0
    prefill_s: float = 10.0
    ceiling_s: float = 1800.0

    @classmethod
    def from_section(cls, section: Any) -> Policy | None:
        """The section's policy, or None (absent: the environment's timeout stays as it is)."""
        if not isinstance(section, dict):
            return None
        known = {k: float(v) for k, v in section.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass(frozen=True)
class Workload:
    """What the environment schedules on the server."""

    reply_tokens: int  # the most tokens one request (one turn) may ask for
    rows: int  # rows decoding at once: group_size x the groups in flight
    turns: int  # requests in a row in one rollout (agent turns)


@dataclass(frozen=True)
class Decoding:
    """The server's measured decode step (`/health`'s `decoding`) and the cap it applies to a reply."""

    step_s: float
    mean_rows: float
    cap: ReplyCap | None = None
    by_rows: dict[int, float] = field(default_factory=dict)  # the mean step at each count of rows seen

    def step_at(self, rows: int) -> tuple[float, str]:
        """A decode step's seconds with `rows` rows, and how it is known: measured there; read off the
        line through the steps measured at two or more counts of rows (a step's fixed cost plus its
        cost a row), never below the slowest measured at fewer rows; else the mean step scaled in
        proportion to the rows (the most a step can grow)."""
        if rows in self.by_rows:
            return self.by_rows[rows], f"measured at {rows} rows"
        points = sorted(self.by_rows.items())
        if len(points) >= 2:
            n = len(points)
            mean_r, mean_s = sum(r for r, _ in points) / n, sum(s for _, s in points) / n
            spread = sum((r - mean_r) ** 2 for r, _ in points)
            slope = max(0.0, sum((r - mean_r) * (s - mean_s) for r, s in points) / spread)
            fewer = [s for r, s in points if r < rows] or [min(s for _, s in points)]
            step = max(mean_s + slope * (rows - mean_r), max(fewer))
            return step, f"read at {rows} rows off the steps measured at {points[0][0]}-{points[-1][0]} rows"
        scale = max(1.0, rows / max(self.mean_rows, 1.0))
        how = f"measured at {self.mean_rows:.1f} rows" + (f", scaled to {rows} rows" if scale > 1 else "")
        return self.step_s * scale, how


@dataclass(frozen=True)
class Fit:
    timeout_s: float
    cut_to: int | None  # the tokens the request asks for instead, where no timeout holds its own ask
    group_timeout_s: float  # the worker_timeout that holds the rollout's turns
    step_s: float | None  # seconds a reply token takes at the scheduled rows (None: not measured yet)
    basis: str


def fit(policy: Policy, floor_s: float, work: Workload, decoding: Decoding | None) -> Fit:
    """The timeout of a request asking for `work.reply_tokens`, with how it was derived."""
    if decoding is None:
        basis = f"the environment's own {floor_s:.0f} s: the server has not timed a decode step yet"
        return Fit(floor_s, None, work.turns * floor_s + policy.prefill_s, None, basis)
    per_token, how = decoding.step_at(work.rows)
    asked = decoding.cap.limit(work.reply_tokens) if decoding.cap else work.reply_tokens
    tokens = asked
    room = (policy.ceiling_s - policy.prefill_s) / (policy.margin * per_token)
    capped = room < tokens
    if capped:
        tokens = max(1, math.floor(room))
    derived = policy.margin * tokens * per_token + policy.prefill_s
    timeout = min(policy.ceiling_s, max(floor_s, derived))
    basis = (
        f"{timeout:.0f} s: {policy.margin:g} x {tokens} tokens x {per_token * 1000:.1f} ms a decode step at the "
        f"{work.rows} rows the run schedules ({how}) + {policy.prefill_s:.0f} s, "
        f"at least the environment's {floor_s:.0f} s and at most {policy.ceiling_s:.0f} s"
    )
    if asked < work.reply_tokens:
        basis += f" (the {work.reply_tokens} tokens asked are capped at {asked} by the server: max_reply_tokens)"
    if capped:
        basis += (
            f"; {asked} tokens cannot fit in {policy.ceiling_s:.0f} s at this speed, so each request "
            f"generates at most {tokens}"
        )
    return Fit(timeout, tokens if capped else None, work.turns * timeout + policy.prefill_s, per_token, basis)


def workload(env_config: Any, asked: int | None) -> Workload:
    """A request's workload from its environment's config (atroposlib's BaseEnvConfig fields)."""

    def number(name: str, default: int) -> int:
        value = getattr(env_config, name, None)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default

    group = number("group_size", 1)
    groups_wanted = number("max_batches_offpolicy", 1) * max(1, number("batch_size", group) // group)
    groups = min(number("max_num_workers", groups_wanted), groups_wanted)
    reply = asked if asked else number("max_token_length", DEFAULT_REPLY_TOKENS)
    return Workload(reply, max(1, groups) * group, number("max_agent_turns", 1))
