"""A training step's freed memory handed back to the system.

On glibc a step's activations are thousands of blocks under the mmap threshold (which rises to
32 MB as large blocks are freed), carved from the allocator's heaps and freed in another order than
they were made: the free space between live blocks stays resident. A supervised stage on
`mcp:time`'s 770-token examples held 15.7 GB for a live peak near 5 GB, and grew by ~4 GB a step
until its heaps covered the worst step. `malloc_trim(0)` gives back the free pages of every arena
(a quarter of a second after such a step, against ~30 s of step). Other C libraries (macOS, musl)
have no `malloc_trim`, and nothing is done there.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # the C library this process already links
    except (AttributeError, OSError):
        return None


def release_freed_memory() -> bool:
    """Give the allocator's free pages back; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
