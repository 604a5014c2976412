"""Victim: a swarmnode GossipTransport publishing a batch every PERIOD s; prints its
libp2p thread's CPU and counters every WINDOW s as JSON lines. IDONTWANT=1: its
swarm.idontwant on (gossipsub v1.2, what the node spoke before feb3745; unset, the
node's default: 1.1 since then); YAPPI=FILE: a profile of its libp2p thread."""
import asyncio, json, os, sys, time, threading, tempfile
from pathlib import Path
from swarmnode.lab.bench_gossip import make_batch
from swarmnode.config import SwarmConfig
from swarmnode.p2p.transport import GossipTransport

PERIOD = float(os.environ.get("PERIOD", "0.5"))
WINDOW = float(os.environ.get("WINDOW", "20"))

def thread_cpu(name):
    for t in threading.enumerate():
        if t.name == name and t.native_id:
            st = open(f"/proc/self/task/{t.native_id}/stat").read().rsplit(")", 1)[1].split()
            return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0

async def main():
    t = GossipTransport(SwarmConfig(enabled=True, name='default', listen=['/ip4/127.0.0.1/tcp/0'], bootstrap=[], inbox_size=4096, idontwant=os.environ.get('IDONTWANT') == '1'), Path(tempfile.mkdtemp()))
    await t.start()
    print(json.dumps({"addr": t.info.listen_addrs[0] + "/p2p/" + t.peer_id if "/p2p/" not in t.info.listen_addrs[0] else t.info.listen_addrs[0]}), flush=True)
    n, t0, c0, k0 = 0, time.monotonic(), thread_cpu("swarmnode-libp2p"), dict(t.stats()["counters"])
    next_pub = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= next_pub:
            await t.publish(make_batch(0, n, 2, 8, 200)); n += 1; next_pub += PERIOD
        await t.receive(timeout=max(0.0, min(next_pub - time.monotonic(), 0.2)))
        t.inbox.drain()
        if time.monotonic() - t0 >= WINDOW:
            c1, st = thread_cpu("swarmnode-libp2p"), t.stats()
            k1 = st["counters"]
            d = {k: v - k0.get(k, 0) for k, v in k1.items() if v != k0.get(k, 0)}
            print(json.dumps({"cpu_per_s": round((c1 - c0) / (time.monotonic() - t0), 4),
                              "peers": st["num_peers"], "mesh": st["mesh_size"], "d": d}), flush=True)
            t0, c0, k0 = time.monotonic(), c1, dict(k1)
            windows = globals().setdefault("W", [0]); windows[0] += 1
            if os.environ.get("YAPPI") and windows[0] == 2:
                import yappi; yappi.set_clock_type("cpu"); yappi.start(builtins=True, profile_threads=True)
            if os.environ.get("YAPPI") and windows[0] == 5:
                import yappi; yappi.stop()
                tid = [t for t in threading.enumerate() if t.name == "swarmnode-libp2p"][0].ident
                ys = [th for th in yappi.get_thread_stats() if th.tid == tid]
                print("libp2p thread yappi total", ys[0].ttot if ys else None, flush=True)
                st = yappi.get_func_stats(filter_callback=lambda f: True, ctx_id=ys[0].id)
                st.save(os.environ["YAPPI"] + ".pstat", type="pstat")
                st.sort("ttot").print_all(out=open(os.environ["YAPPI"], "w"), columns={0: ("name", 90), 1: ("ncall", 10), 2: ("tsub", 9), 3: ("ttot", 9), 4: ("tavg", 9)})
                st.sort("tsub").print_all(out=open(os.environ["YAPPI"] + ".tsub", "w"), columns={0: ("name", 90), 1: ("ncall", 10), 2: ("tsub", 9), 3: ("ttot", 9), 4: ("tavg", 9)})

asyncio.run(main())
