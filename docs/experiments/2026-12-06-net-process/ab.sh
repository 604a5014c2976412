#!/usr/bin/env bash
# The net-process A/B: the same commit, the same command, swarm.net_process on then off.
set -u
cd /work/main
OUT=docs/experiments/2026-12-06-net-process
C=$(git rev-parse --short HEAD)
for arm in net-process thread; do
  f=$OUT/embedded-under-3x300-$C-$arm.txt
  flag=""; [ "$arm" = net-process ] && flag=--net-process
  {
    echo "# commit $C start $(date -u +%FT%TZ) arm $arm"
    echo "# .venv/bin/python scripts/bench_flood.py --model embedded:smollm2-135m --pin --verify when_drawn --phases calm,5sybil_under --cycles 3 --phase-s 300 $flag"
    .venv/bin/python scripts/bench_flood.py --model embedded:smollm2-135m --pin --verify when_drawn --phases calm,5sybil_under --cycles 3 --phase-s 300 $flag
    echo "# end $(date -u +%FT%TZ) rc $?"
  } > "$f" 2>&1
done
