"""A recorded run's config.yaml read back: every reader of a run's settings opens it here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

RUN_CONFIG_ERRORS = (OSError, yaml.YAMLError)  # what read_run_config raises for a file it cannot read


def read_run_config(path: str | Path) -> dict[str, Any]:
    """The config as a mapping ({} for a file that holds none); raises one of RUN_CONFIG_ERRORS."""
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    return data if isinstance(data, dict) else {}
