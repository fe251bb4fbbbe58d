"""The tools' and resources' input types: names, ids and their patterns, checked by the SDK."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

ENV_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"  # ':' as in reasoning_gym:leg_counting
FIELD_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
SERVED_MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}@[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

EnvName = Annotated[
    str,
    Field(
        description="Environment name, as listed by rl_list_environments (e.g. 'gsm8k_tinker')",
        min_length=1,
        max_length=64,
        pattern=ENV_NAME_PATTERN,
    ),
]

RunId = Annotated[
    str,
    Field(
        description="A run id from rl_start_training or rl_list_runs",
        min_length=1,
        max_length=128,
        pattern=RUN_ID_PATTERN,
    ),
]

ServedModelName = Annotated[
    str,
    Field(
        description="A served model's name, <run_id>@<checkpoint>, from rl_serve_model or rl_list_served_models",
        min_length=3,
        max_length=193,
        pattern=SERVED_MODEL_PATTERN,
    ),
]

RunCheckpointChoice = Annotated[
    Literal["best", "final"] | Annotated[int, Field(strict=True, ge=0)] | None,
    Field(
        description="'best' (by validation), 'final' (the last), or a step; default: best where the run "
        "keeps it (keep_best) and has validation evaluations, else final"
    ),
]
