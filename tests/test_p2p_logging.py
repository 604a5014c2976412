"""py-libp2p's loggers go through swarmnode's logging: errors only, one line each."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from swarmnode.config import SwarmConfig
from swarmnode.p2p.transport import GossipTransport


def test_libp2p_warnings_are_quiet_and_errors_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LIBP2P_DEBUG", raising=False)
    GossipTransport(SwarmConfig(enabled=True), tmp_path)  # routes libp2p's loggers
    routing = logging.getLogger("libp2p.kad_dht.peer_routing")
    block = "Failed to open stream to 12D3Koo: protocols not supported:\n  /ipfs/kad/1.0.0\n  ..."
    with caplog.at_level(logging.DEBUG):
        routing.warning(block)  # the every-5-seconds block: dropped
        routing.error("Error searching for peer %s:\n%s", "12D3Koo", "a\nb")
    assert [r.getMessage() for r in caplog.records] == ["Error searching for peer 12D3Koo: | a | b"]


def test_what_a_peer_causes_at_will_is_no_warning_or_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """swarmnode/p2p/quiet.py: py-libp2p's lines about a peer's exchange become debug
    records (seen in the chaos test and with a js-libp2p peer); its lines about the
    node's own machinery keep their level."""
    monkeypatch.delenv("LIBP2P_DEBUG", raising=False)
    GossipTransport(SwarmConfig(enabled=True), tmp_path)  # routes libp2p's loggers
    import libp2p

    import swarmnode.p2p.host  # noqa: F401  (installs the filter at import)

    peer = "12D3KooWpeer"
    lines = [
        ("libp2p.host.basic_host", f"Failed to open stream to peer {peer}:\n  Error: ..."),
        ("libp2p.stream_muxer.yamux.yamux", f"Error in handle_incoming for peer {peer}: X"),
        ("libp2p.protocol_muxer.multiselect_client", "MultiselectClient handshake: read failed"),
        (
            "libp2p.identity.identify_push.identify_push",
            f"Error processing identify/push from {peer}",
        ),
        ("libp2p.network.swarm", f"failed to upgrade security for peer {peer}: handshake failed"),
        ("libp2p.transport.tcp.tcp", "Failed to open TCP stream: all attempts to connect failed"),
        # the node's own: kept
        ("libp2p.kad_dht.kad_dht", "Error in DHT maintenance loop: boom"),
        ("libp2p.stream_muxer.yamux.yamux", "Error in on_close callback: boom"),
        ("libp2p.network.swarm", "Error in background prune: boom"),
    ]
    with caplog.at_level(logging.DEBUG):
        for name, text in lines:
            logging.getLogger(name).error(text)
        # py-libp2p's connection close path logs on the root logger
        root = logging.getLogger()
        path = str(Path(libp2p.__file__).parent / "network/connection/swarm_connection.py")
        root.handle(
            root.makeRecord("root", logging.WARNING, path, 1, "Error resetting stream: x", (), None)
        )
        root.warning("a root warning from elsewhere")
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [
        "Error in DHT maintenance loop: boom",
        "Error in on_close callback: boom",
        "Error in background prune: boom",
        "a root warning from elsewhere",
    ]
