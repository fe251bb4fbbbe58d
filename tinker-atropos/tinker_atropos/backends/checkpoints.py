"""Checkpoint folders and their index: <root>/<run>/{sampler_weights,weights}/<name> + checkpoints.jsonl."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Literal

Kind = Literal["sampler_weights", "weights"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class CheckpointStore:
    """Writes checkpoint folders atomically (staged, then renamed) and appends to the index."""

    def __init__(self, run_dir: Path, run_name: str) -> None:
        self.root = Path(run_dir) / "checkpoints" / run_name
        self.index = self.root / "checkpoints.jsonl"

    def path(self, kind: Kind, name: str) -> Path:
        if not _NAME.match(name):
            raise ValueError(f"checkpoint name {name!r}: use letters, digits, '.', '_' or '-'")
        return self.root / kind / name

    def save(self, kind: Kind, name: str, write: Callable[[Path], None], **extra: object) -> Path:
        """Call `write(folder)` on a staging folder, move it to its place, record it."""
        target = self.path(kind, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
        try:
            write(staging)
            if target.exists():
                shutil.rmtree(target)
            os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self.record(kind, name, str(target), **extra)
        return target

    def record(self, kind: Kind, name: str, path: str, **extra: object) -> None:
        """Append one line to checkpoints.jsonl (also used for tinker:// paths)."""
        self.root.mkdir(parents=True, exist_ok=True)
        entry = {"kind": kind, "name": name, "path": path, "time": time.time(), **extra}
        with self.index.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    def entries(self) -> list[dict]:
        if not self.index.exists():
            return []
        return [json.loads(line) for line in self.index.read_text().splitlines() if line.strip()]
