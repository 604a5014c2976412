"""``swarmnode peers``/``status`` text: peer scores and the graylist are shown."""

from __future__ import annotations

from swarmnode.ops.report import format_peers, format_status
from swarmnode.share.peerscore import PeerScores


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
