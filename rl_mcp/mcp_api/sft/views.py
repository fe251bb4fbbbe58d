"""rl_preview_sft's answer, built from the stage's set.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rl_mcp.mcp_api.sft import descriptions
from rl_mcp.mcp_api.sft.answers import SftExampleView, SftPreview, SftRefusal, SftSpan


def preview_answer(environment: str, folder: Path, summary: dict[str, Any]) -> SftPreview:
    example = summary.get("example")
    steps, per_step = summary.get("steps"), summary.get("seconds_per_step")
    estimated = round(steps * per_step, 1) if steps and per_step else None
    examples = int(summary.get("examples") or 0)
    return SftPreview(
        environment=environment,
        counts=summary.get("counts") or {},
        examples=examples,
        tokens=int(summary.get("tokens") or 0),
        trained_tokens=int(summary.get("trained_tokens") or 0),
        refused=[SftRefusal(**r) for r in summary.get("refused") or []],
        example=None
        if not example
        else SftExampleView(
            source=example["source"], origin=example["origin"], spans=[SftSpan(**s) for s in example["spans"]]
        ),
        steps=steps,
        seconds_per_step=per_step,
        estimated_seconds=estimated,
        estimate=summary.get("estimate"),
        error=summary.get("error"),
        folder=str(folder),
        next_step=descriptions.next_after_preview(examples, steps, estimated),
    )
