"""Children forked from a warm template instead of started cold (`rl_mcp/children/warm_template.py`).

`fork` is what `processes.spawn` tries first; None means start the child the ordinary way.
"""

from rl_mcp.warm_start.templates import (
    READY_WAIT_S,
    WarmChild,
    fork,
    importing,
    prepare,
    ready,
    stop_templates,
    wait_ready,
)

__all__ = ["READY_WAIT_S", "WarmChild", "fork", "importing", "prepare", "ready", "stop_templates", "wait_ready"]
