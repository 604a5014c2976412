"""The garbage collector's clock: every collection counted, timed, and charged to the
trainer thread when it ran there."""

from __future__ import annotations

import gc
import threading

from swarmnode.ops.gcclock import GcClock, gc_clock
from swarmnode.p2p.netshare import TRAINER_THREAD


def _cycles(n: int) -> None:
    for _ in range(n):
        a: list[object] = []
        a.append(a)  # garbage only the collector can free


def test_collections_are_counted_timed_and_charged_to_the_thread_that_ran_them() -> None:
    clock = GcClock()
    gc.callbacks.append(clock)
    try:
        _cycles(1000)
        gc.collect()  # on this thread: not the trainer's
        t = threading.Thread(target=gc.collect, name=f"{TRAINER_THREAD}_0")
        t.start()
        t.join(10)
    finally:
        gc.callbacks.remove(clock)
    snap = clock.snapshot()
    assert snap["collections"][2] >= 2
    assert snap["collected"][2] >= 1000  # the cycles, freed by the first full collection
    assert snap["cpu_s"][2] > 0
    assert 0 < snap["trainer_cpu_s"][2] < snap["cpu_s"][2]  # one of the two was the trainer's
    assert snap["other_cpu_s"][2] > 0


def test_the_process_clock_is_installed_once_and_reported_in_the_status() -> None:
    from swarmnode.ops.status import TrainerStatus

    assert gc_clock() is gc_clock()
    assert gc.callbacks.count(gc_clock()) == 1
    before = gc_clock().snapshot()["collections"][2]
    gc.collect()
    snap = gc_clock().snapshot()
    assert snap["collections"][2] == before + 1
    node = TrainerStatus(gc=snap).control_json()["node"]
    assert node["gc"]["collections"][2] == before + 1
    assert TrainerStatus.from_control(node, None).gc == snap  # read back by `status`
