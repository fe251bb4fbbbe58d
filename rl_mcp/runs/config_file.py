"""A recorded run's config.yaml read back: every reader of a run's settings opens it here.

A status answer reads it three times (identity, facts, sections) and clients poll status every few
seconds: parsed once per version of the file (its inode, mtime and size), with libyaml where PyYAML has it,
each caller given its own copy.
"""

from __future__ import annotations

import copy
import os
import threading
from pathlib import Path
from typing import Any

import yaml

from tinker_atropos.run_files import with_trainer_section

RUN_CONFIG_ERRORS = (OSError, yaml.YAMLError)  # what read_run_config raises for a file it cannot read
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the same YAML, parsed in C (~10x faster)
_MAX_CACHED = 64  # configs kept: a server follows a handful of runs at a time

_cache: dict[tuple[str, int, int, int], dict[str, Any]] = {}
_lock = threading.Lock()  # tools read configs on the event loop and in worker threads


def read_run_config(path: str | Path) -> dict[str, Any]:
    """The config as a mapping ({} for a file that holds none); raises one of RUN_CONFIG_ERRORS."""
    with open(path, encoding="utf-8") as fh:
        stat = os.fstat(fh.fileno())
        key = (os.path.abspath(path), stat.st_ino, stat.st_mtime_ns, stat.st_size)  # a rewrite is a new inode
        with _lock:
            hit = _cache.get(key)
        if hit is None:
            data = yaml.load(fh, Loader=_LOADER)
            hit = with_trainer_section(data) if isinstance(data, dict) else {}  # a run's from before the rename too
            with _lock:
                if len(_cache) >= _MAX_CACHED:
                    _cache.pop(next(iter(_cache)))
                _cache[key] = hit
    return copy.deepcopy(hit)
