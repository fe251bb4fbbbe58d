"""SIGINT, SIGTERM and SIGHUP end a command the way a cancelled task ends: its clean-up runs.

Left to Python, SIGTERM and SIGHUP kill the process on the spot, and SIGINT raises
KeyboardInterrupt wherever the code is (asyncio cancels on the first Ctrl-C, a second one raises
inside the clean-up). Either way the `finally` blocks that stop runs and children are cut short,
and the children, each in its own session, outlive the command. `run` turns the first of these
signals into a cancellation of the whole call, so every shielded stop runs to its end; signals
that follow are logged and ignored (the stops bound themselves with SIGKILL after a grace). Then
`Interrupted` exits with 128 + the signal's number, as a shell reports a killed command.

Every command and bench that starts runs or children runs its async work through `run`.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import anyio.abc

T = TypeVar("T")
EXIT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
log = logging.getLogger(__name__)


class Interrupted(SystemExit):
    """The call was stopped by a signal and has cleaned up; exits with 128 + the signal's number."""

    def __init__(self, signum: signal.Signals) -> None:
        super().__init__(128 + signum.value)
        self.signum = signum


def run(func: Callable[..., Awaitable[T]], *args: object) -> T:
    """`anyio.run(func, *args)`, but an exit signal cancels `func` (its clean-up runs) and then
    raises Interrupted instead of killing the process half-way."""
    return anyio.run(_until_signal, func, args)


async def _until_signal(func: Callable[..., Awaitable[T]], args: tuple[object, ...]) -> T:
    received: list[signal.Signals] = []
    error: Exception | None = None
    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as work:  # the watcher lives outside it: it keeps absorbing signals
            await tg.start(_cancel_on_signal, work, received)
            try:
                result = await func(*args)
            except Exception as exc:  # re-raised below as itself, not inside the task group's ExceptionGroup
                error = exc
        tg.cancel_scope.cancel()
    if received:
        raise Interrupted(received[0]) from error
    if error is not None:
        raise error
    return result


async def _cancel_on_signal(
    work: anyio.CancelScope, received: list[signal.Signals], *, task_status: anyio.abc.TaskStatus[None]
) -> None:
    with anyio.open_signal_receiver(*EXIT_SIGNALS) as signals:
        task_status.started()
        async for signum in signals:
            if not received:
                log.warning("%s: stopping what this command started", signum.name)
                work.cancel()
            else:
                log.warning("%s: still stopping what this command started (kill -9 abandons it)", signum.name)
            received.append(signum)
