"""The draw's one setting, shared by the chat and the agent environments' configs."""

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
