"""py-libp2p's loggers go through swarmnode's logging, at error level unless debugging."""

from __future__ import annotations

import logging

import pytest

from swarmnode.p2p.transport import route_libp2p_logging


def test_libp2p_info_and_warnings_stay_quiet(caplog: pytest.LogCaptureFixture) -> None:
    logging.getLogger("swarmnode").setLevel(logging.INFO)
    route_libp2p_logging()
    chatty = logging.getLogger("libp2p.network.auto_connector")
    chatty.setLevel(logging.INFO)  # as some py-libp2p modules do to themselves
    with caplog.at_level(logging.INFO):
        chatty.info("initiating 199 new dials")
        chatty.warning("protocols not supported:\n/ipfs/kad/1.0.0")
        chatty.error("a real error\nwith a second line")
    texts = [r.getMessage() for r in caplog.records]
    assert texts == ["a real error | with a second line"]
