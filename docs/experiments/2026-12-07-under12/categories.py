"""The libp2p thread's py-spy samples (raw format) in categories, first match wins.

    python3 docs/experiments/2026-12-07-under12/categories.py /tmp/prof/spy.txt
"""

import collections
import sys

RULES = [
    ("trio epoll wait (get_events: idle or polling, not told apart)", "EpollIOManager.get_events"),
    ("forwarding: per-peer send loop (protobuf, noise, yamux, send)", "handle_sending_messages"),
    ("forwarding: gossipsub route + queue (GossipSub.publish)", "GossipSub.publish"),
    ("signature (Ed25519)", "_signature_ok"),
    ("admit hook (originator rates, decode_batch)", "P2PHost._admit"),
    ("py-libp2p validate_msg (validator, validation cache)", "Pubsub.validate_msg"),
    ("push_msg, the rest", "Pubsub.push_msg"),
    ("reading: our read loop", "HardenedPubsub._read_stream"),
    ("reading: yamux frames", "Yamux._handle_incoming"),
    ("deliver to the inbox", "P2PHost._deliver"),
    ("gossipsub heartbeat", "heartbeat"),
    ("trio scheduler (unrolled_run)", "unrolled_run"),
]
WRITES = ("send_all", "_whole_write", "YamuxStream.write", "write_msg", "_nonblocking_helper")

cats: collections.Counter[str] = collections.Counter()
total = 0
for line in open(sys.argv[1]):
    line = line.strip()
    if not line or "libp2p" not in line.split(";")[0]:
        continue
    stack, n = line.rsplit(" ", 1)
    total += int(n)
    name = next((name for name, key in RULES if key in stack), None)
    if name is None:
        top = "a write frame on top" if any(k in stack for k in WRITES) else "anything else"
        name = f"stack not unwound (py-spy --nonblocking): {top}"
    cats[name] += int(n)
print(f"libp2p thread samples: {total}")
for name, n in cats.most_common():
    print(f"{n:5d} {100 * n / total:5.1f}% {name}")
