"""The soak script in its quick form: a real node process on the tiny model, one CSV row
per round with the node's own RSS, a plot, and a last line that parses. No wall-clock
or memory thresholds here: the figures for the default node are in docs/memory.md."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ENV, REPO


def test_quick_soak(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "soak"
    args = ["--quick", "--model", str(tiny_model_dir), "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "scripts/soak.py", *args],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = list(csv.DictReader((out / "soak.csv").open()))
    assert [int(r["round"]) for r in rows] == list(range(1, 9))
    assert all(float(r["rss_mb"]) > 0 and float(r["round_s"]) > 0 for r in rows)
    assert all(r["queue_groups"] == "0" for r in rows)  # a node alone has no queue
    assert (out / "soak.png").stat().st_size > 0
    last = proc.stdout.strip().splitlines()[-1]
    fields = dict(kv.split("=", 1) for kv in last.split())
    assert list(fields)[:4] == ["rounds", "rss_start_mb", "rss_end_mb", "rss_max_mb"]
    assert list(fields)[-1] == "slope_mb_per_100_rounds"
    values = {k: float(v) for k, v in fields.items()}  # every value parses
    assert values["rounds"] == 8
    assert 0 < values["rss_start_mb"] <= values["rss_max_mb"]
    assert values["rss_end_mb"] <= values["rss_max_mb"] <= values["peak_mb"]
    assert values["rss_end_mb"] == float(rows[-1]["rss_mb"])


def test_freed_memory_goes_back_to_the_os() -> None:
    """What the node does every round (swarmnode/learn/memory.py): after many blocks below
    glibc's mmap threshold are freed, malloc_trim returns their pages."""
    import ctypes
    import ctypes.util

    from swarmnode.learn.memory import _glibc, release_free_memory, tune_allocator
    from swarmnode.learn.metrics import rss_mb

    if _glibc() is None:
        assert not tune_allocator() and not release_free_memory()
        return
    assert tune_allocator()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(2**20) for _ in range(200)]  # 1 MiB: under the 4 MiB threshold
    for b in blocks:
        ctypes.memset(b, 1, 2**20)  # touch the pages: resident now
    before = rss_mb()
    for b in blocks[:-1]:  # the last one pins the heap's top: no automatic trim
        libc.free(b)
    assert rss_mb() > before - 100  # freed, but glibc kept the pages
    assert release_free_memory()
    assert rss_mb() < before - 150
    libc.free(blocks[-1])


def test_a_refused_allocator_setting_does_not_stop_the_others(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A setting mallopt refuses (here the mmap threshold, refused by a spy in front of
    glibc) leaves the others to be set, not skipped as they were, and is named."""
    from swarmnode.learn import memory

    libc = memory._glibc()
    if libc is None:
        pytest.skip("not glibc")
    real, tried = libc.mallopt, []

    def spy(param: int, value: int) -> int:
        tried.append(param)
        return 0 if param == memory.M_MMAP_THRESHOLD else int(real(param, value))

    monkeypatch.setattr(libc, "mallopt", spy)
    with caplog.at_level("WARNING", logger=memory.__name__):
        assert memory.tune_allocator.__wrapped__() is False  # past the once-a-process cache
    assert tried == [memory.M_MMAP_THRESHOLD, memory.M_TRIM_THRESHOLD, memory.M_ARENA_MAX]
    assert "M_MMAP_THRESHOLD" in caplog.text and "M_ARENA_MAX" not in caplog.text


def test_threads_allocate_from_one_arena() -> None:
    """The node's trainer thread allocates from the main arena, as the event loop
    does: a second arena's mmapped heaps stayed partly resident after malloc_trim
    (docs/memory.md). glibc's own report (malloc_stats) counts the arenas."""
    code = """
import ctypes, threading
from swarmnode.learn.memory import _glibc, tune_allocator
libc = _glibc()
if libc is None:
    raise SystemExit(0)
assert tune_allocator()
libc.malloc.restype = ctypes.c_void_p
def work():
    kept = [libc.malloc(64 * 1024) for _ in range(64)]  # below the mmap threshold
    for b in kept:
        ctypes.memset(b, 1, 64 * 1024)
threads = [threading.Thread(target=work) for _ in range(3)]
for t in threads: t.start()
for t in threads: t.join()
libc.malloc_stats()  # to stderr: one "Arena N:" paragraph per arena
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    if "Arena" in proc.stderr:  # glibc: exactly the main arena
        assert [ln for ln in proc.stderr.splitlines() if ln.startswith("Arena")] == ["Arena 0:"]
