"""Answers built from the domain's objects by attribute name (pydantic's `from_attributes`): an answer
field is the domain attribute (or property) of the same name, never copied one by one; what the domain
does not hold (a time as ISO text, a path as text, a summary line) is given beside it."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


class _Sources:
    """`extra`, then each of `sources` (None: left out) in turn, read by pydantic as attributes."""

    def __init__(self, sources: tuple[object, ...], extra: dict[str, Any]) -> None:
        self._sources, self._extra = [s for s in sources if s is not None], extra

    def __getattr__(self, name: str) -> Any:
        if name in self._extra:
            return self._extra[name]
        for source in self._sources:
            if hasattr(source, name):
                return getattr(source, name)
        raise AttributeError(name)


def answer_from(model: type[M], *sources: object, **extra: Any) -> M:
    """`model` from its fields' namesakes among `sources`' attributes (the first that has one), `extra`
    for what they do not hold."""
    return model.model_validate(_Sources(sources, extra), from_attributes=True)
