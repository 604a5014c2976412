"""The C allocator's share of a node's resident memory, and giving free memory back.

A round allocates and frees ~1 GB of short-lived tensors (the sampling copy of the
weights, KV caches, full-vocabulary logits, activations and their gradients). Torch's
CPU tensors come from glibc ``malloc``, and glibc keeps what is freed: every block
under its mmap threshold (which rises, by default, to the largest block freed so
far, up to 32 MiB) stays in its heaps for reuse, fragmented. Measured on the default
CPU node (docs/memory.md): after a few rounds ~1.4 GB of a 2.5 GB RSS was free memory
glibc held, not data. So a node, once per round:

- ``tune_allocator`` (once, at start): blocks of at least ``MMAP_THRESHOLD`` bytes are
  mapped on their own and unmapped on free (the threshold no longer rises), and every
  thread allocates from the one main arena (``ARENA_MAX`` = 1: each thread that
  allocates would otherwise get a heap of its own);
- ``release_free_memory`` (after each round): ``malloc_trim(0)`` returns the free
  pages of every heap to the kernel.

Both are no-ops where glibc is missing (macOS, musl): RSS is then the allocator's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
from functools import cache

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

MMAP_THRESHOLD = 4 * 2**20  # blocks this large get their own mapping, returned on free
TRIM_THRESHOLD = 16 * 2**20  # free memory at a heap's top beyond this is returned at once
# One arena for every thread. With two (the event loop's and the trainer thread's),
# the trainer's round of tensors lived in a second arena made of 64 MiB mmapped heaps
# that malloc_trim leaves partly resident: after-round RSS swung by up to 35 MiB and
# crept up over the first rounds, where the main arena stays flat (docs/memory.md).
# The threads that share it rarely malloc at the same time (Python's small objects
# are pymalloc's, tensors of 4 MiB or more are mmapped); the 300-round soak's median
# round was 5.1 s with one arena, 6.2 s with two (on a machine loaded differently).
ARENA_MAX = 1


@cache
def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim  # noqa: B018  (glibc has it; musl does not)
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


@cache
def tune_allocator() -> bool:
    """Fixed mmap and trim thresholds and a bounded arena count (once per process).
    Every setting is tried, whether or not an earlier one was refused; a refused one
    keeps glibc's default and is logged by name. True when all were taken; False
    where this is not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    refused = [
        name
        for name, param, value in (
            ("M_MMAP_THRESHOLD", M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            ("M_TRIM_THRESHOLD", M_TRIM_THRESHOLD, TRIM_THRESHOLD),
            ("M_ARENA_MAX", M_ARENA_MAX, ARENA_MAX),
        )
        if libc.mallopt(param, value) != 1
    ]
    if refused:
        log.warning("mallopt refused %s; glibc keeps its default there", ", ".join(refused))
    return not refused


def release_free_memory() -> bool:
    """Give the free pages glibc holds back to the kernel (``malloc_trim(0)``).
    True when some memory was released."""
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
