#!/usr/bin/env bash
# Where the libp2p thread's CPU goes under five Sybils under every rate: one
# 5sybil_under phase of bench_flood (embedded model, victim pinned to CPU 0), py-spy
# sampling the victim 110 s at 100 Hz from 15 s into the flood. Needs `pip install
# py-spy` in .venv. Raw samples to /tmp/prof/spy.txt; categories: see the README.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p /tmp/prof
.venv/bin/python scripts/bench_flood.py --model embedded:smollm2-135m --pin --verify when_drawn \
  --phases 5sybil_under --cycles 1 --phase-s 150 > /tmp/prof/bench.txt 2>&1 &
B=$!
until pgrep -f swarmnode.lab.flooder >/dev/null; do sleep 2; kill -0 $B 2>/dev/null || exit 1; done
sleep 15
V=$(pgrep -f "swarmnode.cli start" | head -1)
timeout 200 .venv/bin/py-spy record -p "$V" -d 110 -r 100 -f raw -o /tmp/prof/spy.txt --threads --nonblocking
wait $B
