"""SwarmLink's publishing: one message per round, halved until each part fits."""

from __future__ import annotations

from collections import Counter

from swarmnode.groups import ItemRef, RolloutGroup
from swarmnode.p2p.wire import MAX_MESSAGE_BYTES, decode_batch
from swarmnode.swarm import encode_round


def groups(n: int, completions: int, chars: int) -> list[RolloutGroup]:
    return [
        RolloutGroup(
            ItemRef("basic_arithmetic", {}, 0, i),
            f"q{i}",
            ["x" * chars] * completions,
            [float(k % 2) for k in range(completions)],
        )
        for i in range(n)
    ]


def test_one_message_when_it_fits() -> None:
    dropped: Counter[str] = Counter()
    out = encode_round("s", 3, groups(4, 8, 100), dropped)
    assert len(out) == 1 and len(decode_batch(out[0]).groups) == 4 and not dropped


def test_too_large_is_halved_and_a_hopeless_group_dropped() -> None:
    dropped: Counter[str] = Counter()
    big = groups(20, 8, 60_000)  # ~9.6 MB in all, ~0.5 MB a group
    out = encode_round("s", 1, big, dropped)
    assert 10 <= len(out) <= 20 and all(len(p) <= MAX_MESSAGE_BYTES for p in out)
    sent = [g.ref.index for p in out for g in decode_batch(p).groups]
    assert sent == list(range(20)) and not dropped  # all of them, in order
    hopeless = groups(1, 32, 60_000)  # one group over the message limit on its own
    out = encode_round("s", 1, [*groups(2, 2, 10), *hopeless], dropped)
    sent = [g.question for p in out for g in decode_batch(p).groups]
    assert sent == ["q0", "q1"] and dropped == {"too_large": 1}
