"""Whole-message yamux writes (``swarmnode.p2p.yamux_write``).

Two raw py-libp2p hosts (Noise, yamux) in one trio run over loopback. Two tasks
write messages larger than the send window to the same stream at once while the
reader starts late, so every write has to wait for credit in the middle of a
message: the state in which py-libp2p's frame-level locking let another task's
frames in between. The reader parses each message by its own length prefix and
checks every byte, as gossipsub's reader does with its varint prefix.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.network.stream.exceptions import StreamError
from libp2p.peer.peerinfo import info_from_p2p_addr
from multiaddr import Multiaddr

import swarmnode.p2p.host  # noqa: F401  (installs the whole-write rule, as a node does)
from swarmnode.p2p import yamux_write

PROTO = TProtocol("/swarmnode-test/yamux-write/1")
LOOPBACK = Multiaddr("/ip4/127.0.0.1/tcp/0")
WRITERS, MESSAGES, SIZE = 2, 8, 200_000  # 200 KB: most of a 256 KiB window each


def message(writer: int, seq: int) -> bytes:
    return struct.pack(">IBI", SIZE, writer, seq) + bytes([writer + 1]) * SIZE


@pytest.fixture
def stock_writes() -> Iterator[None]:
    yamux_write.uninstall()
    try:
        yield
    finally:
        yamux_write.install()  # the module's state as swarmnode runs it


def exchange() -> tuple[int, str | None]:
    """Messages read intact before the first corrupt one (and what was wrong)."""
    intact, fault = 0, None

    async def main() -> None:
        nonlocal intact, fault
        reader = new_host(key_pair=create_new_key_pair(b"R" * 32), listen_addrs=[LOOPBACK])
        writer = new_host(key_pair=create_new_key_pair(b"W" * 32), listen_addrs=[LOOPBACK])
        done = trio.Event()

        async def read_exactly(stream: object, n: int) -> bytes:
            buf = bytearray()
            while len(buf) < n:
                chunk = await stream.read(n - len(buf))  # type: ignore[attr-defined]
                if not chunk:
                    raise EOFError
                buf.extend(chunk)
            return bytes(buf)

        async def handler(stream: object) -> None:
            nonlocal intact, fault
            await trio.sleep(0.5)  # the writers fill the window and wait mid-message
            try:
                for _ in range(WRITERS * MESSAGES):
                    size, who, _seq = struct.unpack(">IBI", await read_exactly(stream, 9))
                    if size != SIZE or who >= WRITERS:
                        fault = f"bad header after {intact} messages"
                        return
                    if await read_exactly(stream, size) != bytes([who + 1]) * SIZE:
                        fault = f"spliced body after {intact} messages"
                        return
                    intact += 1
            finally:
                done.set()

        reader.set_stream_handler(PROTO, handler)
        async with reader.run(listen_addrs=[LOOPBACK]), writer.run(listen_addrs=[LOOPBACK]):
            with trio.fail_after(60):
                await writer.connect(info_from_p2p_addr(reader.get_addrs()[0]))
                stream = await writer.new_stream(reader.get_id(), [PROTO])

                async def write_all(w: int) -> None:
                    for seq in range(MESSAGES):
                        try:
                            await stream.write(message(w, seq))
                        except StreamError:  # the reader stopped at a corrupt message
                            return

                async with trio.open_nursery() as nursery:
                    for w in range(WRITERS):
                        nursery.start_soon(write_all, w)
                await done.wait()

    trio.run(main)
    return intact, fault


def test_concurrent_writes_arrive_whole() -> None:
    assert yamux_write.install() is False  # swarmnode.p2p.host installed it already
    intact, fault = exchange()
    assert fault is None
    assert intact == WRITERS * MESSAGES


def test_py_libp2p_frame_locking_splices_messages(stock_writes: None) -> None:
    """The before-picture the module exists for (and proof the reader detects it)."""
    intact, fault = exchange()
    assert fault is not None and intact < WRITERS * MESSAGES
