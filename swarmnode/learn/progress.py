"""Progress where a person waits (the first model dequantization, ``swarmnode eval``).

Role: ``progress(what, total, unit)`` is a context manager yielding ``step(n, note)``.
On a terminal (stderr is a TTY) it draws a rich progress bar on stderr; anywhere else
(a daemon's log, a pipe, CI) it logs plain lines on the ``swarmnode.learn.progress`` logger.

Invariants:
- At most one plain line per ``LOG_EVERY_S`` seconds, plus the first and the last, so
  a long eval never floods a log.
- The bar is closed (and the final line logged) also when the work raises.
- Nothing here touches the work itself: ``step`` only counts.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("swarmnode.learn.progress")

LOG_EVERY_S = 10.0

Step = Callable[..., None]


def on_terminal() -> bool:
    return sys.stderr.isatty()


@contextmanager
def progress(what: str, total: int, unit: str = "items") -> Iterator[Step]:
    """Count ``total`` units of ``what``; ``step(n=1, note="")`` after each piece."""
    if on_terminal():
        with _bar(what, total) as step:
            yield step
    else:
        with _lines(what, total, unit) as step:
            yield step


@contextmanager
def _bar(what: str, total: int) -> Iterator[Step]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(what, total=total)

        def step(n: int = 1, note: str = "") -> None:
            bar.update(task, advance=n, description=f"{what}: {note}" if note else what)

        yield step


@contextmanager
def _lines(what: str, total: int, unit: str) -> Iterator[Step]:
    start = time.monotonic()
    state = {"done": 0, "logged": start}
    log.info("%s: 0/%d %s", what, total, unit)

    def step(n: int = 1, note: str = "") -> None:
        state["done"] += n
        now = time.monotonic()
        if now - state["logged"] >= LOG_EVERY_S and state["done"] < total:
            state["logged"] = now
            log.info(
                "%s: %d/%d %s (%.0f%%, %.0fs)%s",
                what,
                state["done"],
                total,
                unit,
                100 * state["done"] / max(1, total),
                now - start,
                f" {note}" if note else "",
            )

    try:
        yield step
    finally:
        done = int(state["done"])
        log.info("%s: %d/%d %s in %.1fs", what, done, total, unit, time.monotonic() - start)
