"""The relay service: py-libp2p's circuit relay v2 (HOP/STOP) with its own byte pump.

Role: ``CircuitV2Protocol`` answers RESERVE and CONNECT on the standard
``/libp2p/circuit/relay/0.2.0/hop`` id and accepts circuits on ``/stop``; the
class here replaces only the part that copies a circuit's bytes.

Why: py-libp2p registers circuits by peer id, so a second circuit with the same
peer (two peers reaching one NATed peer, or two peers dialling each other at once)
overwrites the first one's entry, and when either circuit ends, its cleanup closes
the streams registered under that peer id: the *other* circuit. In the NAT test the
two trainers' first circuits died ten seconds after they came up.

Invariants:
- A circuit is two pumps (one per direction) over the same two streams; when
  either ends, it closes those two streams and forgets only the registry entries
  that point at them.
- A circuit ends at its deadline (``relay.max_circuit_s``) even when idle, and when
  its byte budget (``relay.max_circuit_mib``, shared by both directions) is spent;
  a write the receiving peer does not take within ``WRITE_TIMEOUT_S`` ends it too.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import trio
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol

log = logging.getLogger("swarmnode.p2p")

WRITE_TIMEOUT_S = 60.0  # a receiver that reads nothing for this long is gone
_CHUNK = 65535


class RelayService(CircuitV2Protocol):
    """``CircuitV2Protocol`` whose circuits cannot close each other (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.live_legs = 0  # two per circuit being relayed

    @property
    def circuits(self) -> int:
        return self.live_legs // 2

    async def _relay_data(
        self,
        src_stream: Any,
        dst_stream: Any,
        peer_id: Any,
        deadline: float | None = None,
        circuit_data_limit: list[int] | None = None,
    ) -> None:
        """Copy ``src_stream`` to ``dst_stream`` until one ends or a limit is hit."""
        end = math.inf if deadline is None else deadline
        why = "closed"
        self.live_legs += 1
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    why = "duration limit"
                    break
                with trio.move_on_after(left):
                    data = await src_stream.read(_CHUNK)
                if not data:
                    break
                if circuit_data_limit is not None:
                    if len(data) > circuit_data_limit[0]:
                        why = "data limit"
                        break
                    circuit_data_limit[0] -= len(data)
                with trio.fail_after(WRITE_TIMEOUT_S):
                    await dst_stream.write(data)
        except trio.TooSlowError:
            why = "receiver stalled"
        # a reset, closed or broken stream on either side ends the circuit
        except Exception as err:
            why = f"{err.__class__.__name__}"
        finally:
            self.live_legs -= 1
            log.debug("circuit leg for %s ended: %s", peer_id, why)
            with trio.CancelScope(shield=True), trio.move_on_after(2.0):
                for stream in (src_stream, dst_stream):
                    await self._close_stream(stream)
            mine = {id(src_stream), id(dst_stream)}
            for key, legs in list(self._active_relays.items()):
                if {id(s) for s in legs if s is not None} & mine:
                    self._active_relays.pop(key, None)
