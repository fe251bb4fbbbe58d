"""Registries that other installed packages extend through an entry-point group (a loss, an
environment format): the built-in ones first, then each package's, by name. Stdlib only: the server
builds its registries with it too."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Protocol, TypeVar

logger = logging.getLogger(__name__)


class Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Named)


def _installed(group: str, kind: type[T], what: str) -> list[T]:
    """What other packages register in `group`: an instance of `kind`, or a `kind` subclass (made
    with no arguments). One that cannot be loaded, or is neither, is left out with the reason in the
    log, never failing the process that asked."""
    found = []
    for point in entry_points(group=group):
        try:
            loaded = point.load()
            made = loaded() if isinstance(loaded, type) and issubclass(loaded, kind) else loaded
        except Exception as exc:  # a plugin's import may fail any way
            logger.warning("%s %s (%s) left out: it cannot be loaded: %s", what, point.name, point.value, exc)
            continue
        if not isinstance(made, kind):
            logger.warning(
                "%s %s (%s) left out: it is no %s.%s", what, point.name, point.value, kind.__module__, kind.__name__
            )
        else:
            found.append(made)
    return found


def registry(built_in: Iterable[T], group: str, kind: type[T], what: str) -> dict[str, T]:
    """Name -> thing: the built-in ones, then those installed packages name in `group` (a taken name
    is left out, with a log line)."""
    things = {thing.name: thing for thing in built_in}
    for thing in _installed(group, kind, what):
        if thing.name in things:
            logger.warning("%s %s from an entry point left out: the name is taken", what, thing.name)
        else:
            things[thing.name] = thing
    return things
