"""``swarmnode peers``/``status`` text: peer scores and the graylist are shown; the typed
status reads back from its control reply; the per-peer tables are bounded."""

from __future__ import annotations

import json

from swarmnode.learn.metrics import RoundRecord
from swarmnode.ops.report import format_peers, format_status
from swarmnode.ops.status import ControlReply, SapoSummary, TrainerStatus
from swarmnode.share.exchange import ExchangeStatus, IngestFigures
from swarmnode.share.memory_transport import MemoryNetwork
from swarmnode.share.peerscore import PeerScores
from swarmnode.share.sampler import PeerLRU


def test_peers_and_status_show_scores_and_graylist() -> None:
    scores = PeerScores(graylist_score=-100.0)
    scores.report("12D3KooWHonestPeerAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "accepted", 3)
    bad = "12D3KooWFloodingPeerBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
    scores.report(bad, "invalid", 11)
    swarm = {
        "peer_id": "me",
        "connected_peers": [],
        "peer_scores": scores.snapshot(),
        "graylisted": sorted(scores.graylisted()),
    }
    text = format_peers({"swarm": swarm})
    assert f"graylisted: 1\n  {bad}" in text
    lines = text.splitlines()
    first = lines.index("peer scores (lowest first):")
    assert "-110.00  GRAYLISTED  invalid=11" in lines[first + 1]
    assert "3.00  accepted=3" in lines[first + 2]
    status = format_status(
        {"swarm": swarm, "node": {"ingest": {"ingest_time_share": 0.12, "ingest_busy_s": 3.5}}}
    )
    assert "GRAYLISTED" in status and "ingest time share 0.12  (busy 3.5s" in status
    assert "graylisted: 0" in format_peers({"swarm": {"peer_id": "me"}})  # older replies


def test_a_trainer_status_reads_back_from_its_control_reply() -> None:
    """What the control socket sends (JSON) is read back into the same typed status
    ``swarmnode status`` formats: nothing lost on the way but the dashboard's part."""
    net = MemoryNetwork().transport("A")
    net.offer("X", b"\xc1 not msgpack")
    ingest = IngestFigures(queue_groups=3, ingest_rejected={"stale": 2}, per_peer={"B": 3})
    exchange = ExchangeStatus(network=net.stats(), ingest=ingest, published={"messages": 4})
    status = TrainerStatus(
        name="n",
        state="training",
        round=7,
        sapo=SapoSummary("adaptive", 2, 6),
        last_round=RoundRecord(round=7, reward_mean=0.25),
        trained_from={"B": 5},
        trained_from_forgotten=2,
        peer_trust={"B": 0.5},
        exchange=exchange,
    )
    reply = json.loads(json.dumps({"pid": 9, **status.control_json()}))
    back = ControlReply.from_json(reply)
    assert back.pid == 9 and back.swarm == net.stats()
    assert back.node == status  # every field the reply carries, typed again
    text = format_status(reply)
    assert "round 7  (max None)" in text and "rejected 1: msgpack=1" in text
    assert "rejected: stale=2" in text and "queue per peer: B=3" in text
    assert "from: B=5  (and 2 peers forgotten)" in text and "reward_mean=0.25" in text


def test_peer_tables_are_bounded_and_count_what_they_forget() -> None:
    trust: PeerLRU[float] = PeerLRU(3, default=1.0)
    for i in range(10):
        trust[f"sybil{i}"] = 0.5
    trust["sybil8"] = 0.1  # the most recent again: the next one forgets sybil7
    trust["late"] = 0.9
    assert set(trust) == {"sybil9", "sybil8", "late"} and trust.forgotten == 8
    assert trust["sybil0"] == 1.0 and "sybil0" not in trust  # forgotten: as new
