"""A paced read ends with its connection (swarmnode/p2p/framing.py ``ReadBudget.pace``).

Found by the chaos test: every new identity is a newcomer, all newcomers share one
read budget, and a Sybil flood runs that pool minutes into debt. Each pubsub
reader then slept its share of the debt even after its connection had closed,
holding its stream handler, its connection's tasks and their memory: the node's
live trio tasks grew by hundreds over a ten-minute churn. Mock clock: no sleeps.
"""

from __future__ import annotations

import trio
import trio.testing

from swarmnode.p2p.framing import ReadBudget
from swarmnode.share.inbox import Counters


def test_a_paced_read_ends_when_its_connection_closes() -> None:
    budget = ReadBudget(1.0, 1e9, Counters(), newcomer_s=0.0)
    woke: dict[str, float] = {}

    async def reader(name: str, until: trio.Event | None) -> None:
        await budget.pace(name, 100, 0, until=until)  # 100 frames at 1 a second: debt
        woke[name] = trio.current_time()

    async def main() -> None:
        closed = trio.Event()
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader, "gone", closed)
            nursery.start_soon(reader, "open", None)
            await trio.sleep(1.0)
            closed.set()  # the first reader's connection closes
        assert round(woke["gone"] - start) == 1  # woke with its connection
        assert round(woke["open"] - start) >= 90  # the other still paid its debt

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
