"""The DHT lookup pacer: base pace while lookups learn, doubling to a cap while not."""

from itertools import pairwise

from swarmnode.p2p.lookup_pacer import LookupPacer


def _run(pacer: LookupPacer, ticks: int, learn_at: frozenset[int] = frozenset()) -> list[float]:
    """Tick every 5 s; return the tick times at which a lookup ran."""
    ran = []
    for i in range(ticks):
        now = 5.0 * i
        if pacer.due(now, 3):
            ran.append(now)
            pacer.done(now, learned=i in learn_at)
    return ran


def test_backs_off_to_the_cap_while_nothing_is_learned():
    pacer = LookupPacer(5.0, max_s=60.0)
    ran = _run(pacer, 80)  # 400 s
    gaps = [b - a for a, b in pairwise(ran)]
    assert gaps[:4] == [10.0, 20.0, 40.0, 60.0]
    assert set(gaps[3:]) == {60.0}
    assert pacer.skipped == 80 - len(ran)


def test_learning_keeps_the_base_pace():
    pacer = LookupPacer(5.0, max_s=60.0)
    ran = _run(pacer, 10, learn_at=frozenset(range(10)))
    assert ran == [5.0 * i for i in range(10)]


def test_a_lost_peer_resets_the_wait():
    pacer = LookupPacer(5.0, max_s=300.0)
    for i in range(200):  # 1000 s: backed off to the cap
        if pacer.due(5.0 * i, 4):
            pacer.done(5.0 * i, learned=False)
    assert pacer.wait_s == 300.0
    assert not pacer.due(1000.0, 4)
    assert pacer.due(1000.0, 3)  # one peer fewer: look again now
    pacer.done(1000.0, learned=False)
    assert pacer.wait_s == 10.0
