"""Yamux window credit in half-window steps (``swarmnode.p2p.yamux_window``).

Two raw py-libp2p hosts (Noise, yamux) in one trio run over loopback: one writes
300 gossip-sized messages and then one message of 1 MiB (the pubsub cap) on a
stream; the other reads them all. WINDOW_UPDATE frames are counted by wrapping
py-libp2p's ``send_window_update``, and every byte is checked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.stream_muxer.yamux.yamux import DEFAULT_WINDOW_SIZE, YamuxStream
from multiaddr import Multiaddr

import swarmnode.p2p.host  # noqa: F401  (installs the half-window rule, as a node does)
from swarmnode.p2p import yamux_window

PROTO = TProtocol("/swarmnode-test/yamux-window/1")
SMALL, BIG = [bytes([i % 251]) * 3000 for i in range(300)], b"\x07" * (1 << 20)
LOOPBACK = Multiaddr("/ip4/127.0.0.1/tcp/0")


@pytest.fixture
def updates() -> Iterator[list[int]]:
    """Increments of every WINDOW_UPDATE sent while the test runs."""
    sent: list[int] = []
    original = YamuxStream.send_window_update

    async def counting(self: YamuxStream, increment: int, skip_lock: bool = False) -> None:
        if increment > 0:
            sent.append(increment)
        await original(self, increment, skip_lock)

    YamuxStream.send_window_update = counting  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        YamuxStream.send_window_update = original  # type: ignore[method-assign]
        yamux_window.install()  # the module's state as swarmnode runs it


def transfer() -> bytes:
    """Send SMALL then BIG from one host to the other; what the reader got."""
    got = bytearray()
    expected = sum(map(len, SMALL)) + len(BIG)

    async def main() -> None:
        reader = new_host(key_pair=create_new_key_pair(b"r" * 32), listen_addrs=[LOOPBACK])
        writer = new_host(key_pair=create_new_key_pair(b"w" * 32), listen_addrs=[LOOPBACK])
        done = trio.Event()

        async def handler(stream: object) -> None:
            while len(got) < expected:
                got.extend(await stream.read(65536))  # type: ignore[attr-defined]
            done.set()

        reader.set_stream_handler(PROTO, handler)  # type: ignore[arg-type]
        async with reader.run(listen_addrs=[LOOPBACK]), writer.run(listen_addrs=[LOOPBACK]):
            addr = reader.get_addrs()[0]
            with trio.fail_after(60):  # a stalled sender would hang here
                await writer.connect(info_from_p2p_addr(addr))
                stream = await writer.new_stream(reader.get_id(), [PROTO])
                for msg in SMALL:
                    await stream.write(msg)
                    await trio.sleep(0)  # one read each, as gossip messages arrive
                await stream.write(BIG)
                await done.wait()

    trio.run(main)
    return bytes(got)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_credit_comes_back_in_half_windows_and_nothing_stalls(updates: list[int]) -> None:
    assert yamux_window.install() is False  # swarmnode.p2p.host installed it already
    total = sum(map(len, SMALL)) + len(BIG)
    got = transfer()
    assert digest(got) == digest(b"".join(SMALL) + BIG)
    half = DEFAULT_WINDOW_SIZE // 2
    assert updates and all(inc >= half for inc in updates)
    assert len(updates) <= total // half + 1  # 1.9 MB in 128 KiB steps: at most 15
    assert sum(updates) <= total + 256  # never handed out twice (+ multistream handshake)


def test_py_libp2p_rule_sends_an_update_per_read(updates: list[int]) -> None:
    """The before-picture the module exists for (and proof the counter counts)."""
    yamux_window.uninstall()
    got = transfer()
    assert digest(got) == digest(b"".join(SMALL) + BIG)
    assert len(updates) >= len(SMALL) // 2  # about one per gossip-sized read
