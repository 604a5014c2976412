"""N stock py-libp2p hosts meshed with the victim, publishing nothing, for S seconds.
NOIDW=1: they send no IDONTWANT (to separate the victim's send cost from its read cost)."""
import os, sys, trio
from libp2p.pubsub.gossipsub import GossipSub
from swarmnode.lab import flooder as bf  # bench_flood's Flooder, moved since
if os.environ.get("NOIDW"):
    async def _none(self, msg_id, topic_ids): return None
    GossipSub._emit_idontwant_for_message = _none
addr, n, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
f = bf.Flooder(addr, n, secs, bf.SILENT, 0, 1)
async def go():
    with trio.move_on_after(secs + 30):
        await f.main()
trio.run(go)
os._exit(0)
