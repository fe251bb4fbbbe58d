"""Checkpoint folders, written atomically (staged, then renamed) and indexed (run_files)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinker_atropos.run_files import CheckpointKind, RunFiles, read_checkpoints, record_checkpoint

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class CheckpointStore:
    """`checkpoints/<run_name>/{sampler_weights,weights}/<name>` of one run, and their index."""

    def __init__(self, run_dir: str | Path, run_name: str) -> None:
        self.run_dir = Path(run_dir)
        self.run_name = run_name
        self.root = RunFiles(self.run_dir).checkpoint_root(run_name)

    def path(self, kind: CheckpointKind, name: str) -> Path:
        if not _NAME.match(name):
            raise ValueError(f"checkpoint name {name!r}: use letters, digits, '.', '_' or '-'")
        return self.root / CheckpointKind(kind) / name

    def save(self, kind: CheckpointKind, name: str, write: Callable[[Path], None], **extra: object) -> Path:
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

    def record(self, kind: CheckpointKind, name: str, path: str, **extra: object) -> None:
        """Index a checkpoint (also used for tinker:// paths)."""
        record_checkpoint(self.run_dir, self.run_name, kind, name, path, **extra)

    def delete(self, path: str | Path) -> None:
        """Remove a checkpoint folder of this run (never anything outside its checkpoint root)."""
        folder = Path(path).resolve()
        if not folder.is_relative_to(self.root.resolve()):
            raise ValueError(f"{path} is not a checkpoint of this run ({self.root})")
        shutil.rmtree(folder, ignore_errors=True)

    def entries(self) -> list[dict[str, Any]]:
        return read_checkpoints(self.run_dir, self.run_name)
