"""The one place where the domain's user-facing errors become MCP tool errors."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast

from mcp.server.mcpserver.exceptions import ToolError

from rl_mcp.errors import UserError

F = TypeVar("F", bound=Callable[..., Any])


def tool_errors(fn: F) -> F:
    """Turn a `UserError` raised by `fn` into a `ToolError` with its message (isError for the client).

    The wrapper keeps `fn`'s signature and annotations, which the SDK reads to build the schema.
    """
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except UserError as exc:
                raise ToolError(str(exc)) from exc

        return cast(F, async_wrapper)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            raise ToolError(str(exc)) from exc

    return cast(F, wrapper)
