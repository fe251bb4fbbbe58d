"""The KV cache of token sequences a sampler has already run, found again by longest common prefix.

Requests to one sampler repeat their beginnings: every chat prompt starts with the same template
and system prompt, an evaluation's items differ only in the question, an agent's every rollout
carries the same tool schemas and its every turn re-sends the whole conversation so far. A
causal model's keys and values for a prefix do not depend on what follows it, so the cache of any
earlier sequence serves every later prompt that starts the same way, up to where they part; only
the rest is prefilled. The cache belongs to one sampler, whose weights never change (a weight swap
makes a new sampler), so an entry never goes stale. Entries are evicted least recently used first
past a byte budget.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

PREFIX_CACHE_BYTES = 512 << 20  # ~11k tokens of SmolLM2-135M's keys and values (46 KB a token)
MIN_REUSE = 16  # a shorter shared prefix is cheaper to recompute than to copy in


@dataclass
class Entry:
    tokens: np.ndarray  # int64 [length]
    keys: list[torch.Tensor]  # per layer [heads, length, dim]
    values: list[torch.Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


@dataclass(frozen=True)
class Hit:
    """The first `length` positions of `entry` are the prompt's own."""

    entry: Entry
    length: int


class PrefixCache:
    def __init__(self, max_bytes: int = PREFIX_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, Entry] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prompt: list[int] | np.ndarray) -> Hit | None:
        """The entry sharing the longest prefix with `prompt`, at most all but its last token
        (whose logits the prefill must produce); None below MIN_REUSE."""
        ids = np.asarray(prompt, dtype=np.int64)[:-1]
        best_key, best_length = None, MIN_REUSE - 1
        for key, entry in self._entries.items():
            n = common_prefix(entry.tokens, ids)
            if n > best_length:
                best_key, best_length = key, n
        if best_key is None:
            return None
        self._entries.move_to_end(best_key)
        return Hit(self._entries[best_key], best_length)

    def add(self, tokens: list[int] | np.ndarray, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Keep a sequence's cache (tensors it owns: [heads, length, dim] per layer). Entries it
        extends are dropped: it serves everything they did."""
        ids = np.asarray(tokens, dtype=np.int64)
        if len(ids) < MIN_REUSE:
            return
        for key, entry in list(self._entries.items()):
            shared = common_prefix(entry.tokens, ids)
            if shared == len(entry.tokens):
                self._drop(key)
            elif shared == len(ids):
                self._entries.move_to_end(key)
                return  # an entry already covers it
        entry = Entry(ids, keys, values)
        if entry.nbytes > self.max_bytes:
            return
        self._entries[id(entry)] = entry
        self._bytes += entry.nbytes
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: int) -> None:
        self._bytes -= self._entries.pop(key).nbytes


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common prefix of two token arrays."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n
