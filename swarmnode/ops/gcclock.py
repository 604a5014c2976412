"""What Python's cyclic garbage collector costs this process, by generation and thread.

CPython (3.11) runs a collection in whichever thread allocates the object that takes
generation 0 over its threshold, holding the GIL, and a full (generation 2)
collection walks every tracked object of the process: torch's and transformers'
modules and functions, the model's, the ingestion queue's groups, py-libp2p's caches.
Objects that outlive their first collections (queued groups, seen caches, scores)
bring full collections sooner, and the trainer pays for the ones it happens to
trigger. ``GcClock`` times every collection with ``gc.callbacks``, so that
``swarmnode status`` (``node.gc``) and the flood bench show what the collector costs,
and whose time it takes.

Invariants:
- One clock per process (``gc_clock``), installed once; its callback keeps no object
  and does O(1) work per collection.
- Its figures only go up (sums since the clock was installed): counters, like the
  status' ``totals``.
- Seconds are the collecting thread's CPU time (``time.thread_time_ns``); a thread
  whose name starts with ``netshare.TRAINER_THREAD`` counts as the trainer.
"""

from __future__ import annotations

import gc
import threading
import time
from functools import cache
from typing import Any

from swarmnode.p2p.netshare import TRAINER_THREAD

GENERATIONS = 3


class GcClock:
    """Collections, objects collected and CPU seconds, per generation; the trainer
    thread's share of the seconds."""

    def __init__(self) -> None:
        self.collections = [0] * GENERATIONS
        self.collected = [0] * GENERATIONS
        self.cpu_ns = [0] * GENERATIONS
        self.trainer_cpu_ns = [0] * GENERATIONS
        self._t0 = 0  # the running collection's start (collections never overlap: GIL)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.thread_time_ns()
            return
        gen, spent = info["generation"], time.thread_time_ns() - self._t0
        self.collections[gen] += 1
        self.collected[gen] += info["collected"]
        self.cpu_ns[gen] += spent
        if threading.current_thread().name.startswith(TRAINER_THREAD):
            self.trainer_cpu_ns[gen] += spent

    def snapshot(self) -> dict[str, Any]:
        """The figures so far, JSON-able (``node.gc`` in the status)."""
        return {
            "collections": list(self.collections),
            "collected": list(self.collected),
            "cpu_s": [round(ns / 1e9, 4) for ns in self.cpu_ns],
            "trainer_cpu_s": [round(ns / 1e9, 4) for ns in self.trainer_cpu_ns],
            "other_cpu_s": [
                round((a - t) / 1e9, 4)
                for a, t in zip(self.cpu_ns, self.trainer_cpu_ns, strict=True)
            ],
        }


@cache
def gc_clock() -> GcClock:
    """This process's clock, installed in ``gc.callbacks`` on the first call."""
    clock = GcClock()
    gc.callbacks.append(clock)
    return clock
