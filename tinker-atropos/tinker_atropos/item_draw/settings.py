"""The draw's settings, shared by the chat and the agent environments' configs."""

from __future__ import annotations

from pydantic import BaseModel, Field


class DrawSettings(BaseModel):
    item_window: int = Field(
        default=2,
        ge=0,
        description="Groups per training item that decide its draw: an item every reply of its last N groups "
        "solved is retired (rechecked now and then), one none solved is drawn less often; once every item is "
        "retired the run ends as completed. 0: every item in turn, always.",
    )
    probe_replies: int = Field(
        default=2,
        ge=0,
        description="Replies sampled first for an item whose last group tied (or for any item while most groups "
        "tie): when they score the same the group stops there, counted as a tie; when they differ the rest of "
        "the group is sampled and trained with them. 0, or item_window 0: every group whole, as in an environment "
        "that sends tied groups to the trainer (ensure_scores_are_not_same false).",
    )
