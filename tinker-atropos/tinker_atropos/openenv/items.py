"""The episodes an OpenEnv environment is trained on: each one `reset`'s arguments, an optional
prompt shown before the first observation, and an optional split. From a JSONL file, or from the
environment's own Task API (`/{env}/splits`, `/{env}/tasks`) where it serves one."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tinker_atropos.http_tls import shared_tls

ITEM_FIELDS = {"id", "reset", "prompt", "split"}
SPLITS = ("train", "eval")


class ItemsError(ValueError):
    """An items file (or line) that cannot be used: names the line and the fix."""


@dataclass(frozen=True)
class EpisodeItem:
    id: str
    reset: dict[str, Any] = field(default_factory=dict)
    prompt: str = ""
    split: str | None = None


def _item(record: Any, where: str, default_id: str) -> EpisodeItem:
    if not isinstance(record, dict):
        raise ItemsError(f"{where}: expected a JSON object with `reset` (and optional prompt, split, id)")
    unknown = set(record) - ITEM_FIELDS
    if unknown:
        raise ItemsError(f"{where}: unknown field(s) {sorted(unknown)}; an item has {sorted(ITEM_FIELDS)}")
    reset = record.get("reset", {})
    if not isinstance(reset, dict):
        raise ItemsError(f"{where}: `reset` must be an object of reset()'s keyword arguments, not {reset!r:.80}")
    split = record.get("split")
    if split is not None and split not in SPLITS:
        raise ItemsError(f"{where}: split {split!r} is neither 'train' nor 'eval'")
    prompt = record.get("prompt", "")
    if not isinstance(prompt, str):
        raise ItemsError(f"{where}: `prompt` must be a string")
    return EpisodeItem(str(record.get("id") or default_id), reset, prompt, split)


def read_items(path: Path) -> list[EpisodeItem]:
    try:
        lines = path.read_text().split("\n")
    except OSError as exc:
        raise ItemsError(f"the items file {path} cannot be read: {exc.strerror or exc}") from None
    items = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ItemsError(f"{path} line {number}: not JSON ({exc})") from None
        items.append(_item(record, f"{path} line {number}", f"line {number}"))
    if not items:
        raise ItemsError(
            f'the items file {path} holds no item: write one JSON object per line, e.g. {{"reset": {{"seed": 1}}}}'
        )
    return items


async def served_items(base_url: str, timeout_s: float) -> list[EpisodeItem] | None:
    """The environment's own tasks, each split's (a split of type `train` trains, the others are held
    out), a task object passed to reset() as its keyword arguments; None where none are served."""
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, trust_env=False, verify=shared_tls()) as client:
        names = await client.get("/list_environments")
        if names.status_code != 200 or not names.json():
            return None
        env = names.json()[0]
        splits = await client.get(f"/{env}/splits")
        if splits.status_code != 200:
            return None
        items: list[EpisodeItem] = []
        for split in splits.json():
            answer = await client.post(f"/{env}/tasks", json={"split": split["name"]})
            if answer.status_code != 200:
                return None
            side = "train" if split.get("type") == "train" else "eval"
            for i, task in enumerate(answer.json().get("tasks") or []):
                reset = task if isinstance(task, dict) else {"task": task}
                items.append(EpisodeItem(f"{split['name']}/{i}", reset, "", side))
    return items or None
