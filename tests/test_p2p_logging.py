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
