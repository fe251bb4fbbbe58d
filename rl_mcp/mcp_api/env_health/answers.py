"""Answer models of what an environment process reports (env_health.json): the groups it
discarded, the replies that ran to their cap, its requests' timeouts (rl_test_inference's and
rl_check_status's answers)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class DiscardedGroups(BaseModel):
    """Rollouts whose collect_trajectories returned no group and raised nothing."""

    groups_discarded: int = Field(description="Rollouts that returned no group, in all")
    in_a_row: int = Field(description="... since the environment last scored a group")
    groups_scored: int
    scores: list[float] | None = Field(
        description="What the environment recorded for the latest discarded group's replies (Atropos' "
        "percent_correct_buffer: each reply's score or correctness); null where it keeps no such list"
    )
    sample_replies: list[str] = Field(description="The latest discarded group's replies (cut)")
    likely_cause: str | None = Field(
        description="sequences too long (past the trainer's max_token_trainer_length), equal scores or "
        "replies too short, where the group, its replies and scores show it"
    )
    usual_causes: list[str] = Field(description="What usually makes an environment discard a group, most likely first")


class RepliesAtCap(BaseModel):
    """Replies that ended at their token cap (finish_reason 'length'): cut, not finished."""

    replies_at_cap: int
    replies: int = Field(description="Replies in all")
    cut_by: str = Field(
        description="max_reply_tokens (the product's cap, where the environment asks for more than the model's "
        "context), context (the prompt left less than asked), or the environment's own field"
    )
    field: str | None = Field(description="The config field that caps them (rl_edit_config); null: none can")
    summary: str


class EnvRequests(BaseModel):
    """The environment's model requests: each try atroposlib retries counts."""

    sent: int
    answered: int
    timeouts: int = Field(description="Tries that outlived the client's timeout (atroposlib tries a request 3 times)")
    client_retries: int = Field(description="Requests the openai client sent again itself")
    client_timeout_s: float | None = Field(description="The timeout of the latest request try")
    client_timeout_basis: str | None = Field(
        None,
        description="How that timeout was derived: the reply tokens asked for, the server's measured decode "
        "speed at the rows the run schedules, the margin and bounds (null: the environment's own, unchanged)",
    )
    in_flight: int
    oldest_in_flight_s: float | None = Field(description="How long the oldest request in flight has waited")
    reply_tokens: int = Field(description="Tokens of the replies received")
    replies_at_cap: RepliesAtCap | None
    timeouts_summary: str | None = Field(description="Why requests time out and the field that would shorten them")
