#!/usr/bin/env bash
# bench_scale A/B: the same commit, swarm.net_process on then off.
set -u
cd /work/main
OUT=docs/experiments/2026-12-06-net-process
C=$(git rev-parse --short HEAD)
for arm in net-process thread; do
  f=$OUT/scale-2x240-$C-$arm.txt
  flag=""; [ "$arm" = net-process ] && flag=--net-process
  {
    echo "# commit $C start $(date -u +%FT%TZ) arm $arm"
    echo "# .venv/bin/python scripts/bench_scale.py --model embedded:smollm2-135m --pin --verify when_drawn --cycles 2 --phase-s 240 $flag"
    .venv/bin/python scripts/bench_scale.py --model embedded:smollm2-135m --pin --verify when_drawn --cycles 2 --phase-s 240 $flag
    echo "# end $(date -u +%FT%TZ) rc $?"
  } > "$f" 2>&1
done
