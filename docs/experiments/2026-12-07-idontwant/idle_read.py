"""The idle A/B's figures: the libp2p thread's CPU (cores) alone and with five idle
stock peers (steady 15 s windows: five peers meshed, no GRAFT, a full window of
frames), per side. usage: python idle_read.py raw-idle/*.jsonl"""
import json
import statistics
import sys

by: dict[str, dict[str, list[float]]] = {}
frames: dict[str, list[int]] = {}
for path in sys.argv[1:]:
    side = path.rsplit("/", 1)[-1][:-len("1-xxxxxxx.jsonl")]
    rows = [json.loads(ln) for ln in open(path) if ln.startswith('{"cpu')]
    d = by.setdefault(side, {"alone": [], "five": []})
    for r in rows:
        if r["peers"] == 0:
            d["alone"].append(r["cpu_per_s"])
        elif r["peers"] == 5 and "control.graft" not in r["d"] and r["d"].get("msgs_out", 0) >= 29 and r["d"].get("ping_via_muxer", 0) >= 15:
            d["five"].append(r["cpu_per_s"])
            frames.setdefault(side, []).append(r["d"].get("frames_in", 0))
for side, d in by.items():
    a, f = statistics.fmean(d["alone"]), statistics.fmean(d["five"])
    print(f"{side}: alone {a:.4f} ({len(d['alone'])} windows), five idle peers {f:.4f} "
          f"({len(d['five'])} windows, {min(d['five']):.4f}-{max(d['five']):.4f}), "
          f"added {f - a:.4f}, frames in a 15 s window {statistics.fmean(frames[side]):.0f}")
