#!/usr/bin/env bash
# Item 5 of issue 28: 200 honest peers at 20 messages a second against one node on the
# embedded model, six cycles of 240 s so that the interval comes near +-5% (two cycles
# gave +-9% on 455ecef, before the node stopped serving gossipsub v1.2). Nothing else
# runs on the machine meanwhile. Each phase's line lands in the raw file as it ends.
set -u
cd "$(dirname "$0")/../../.."
OUT=docs/experiments/2026-12-07-scale6
C=$(git rev-parse --short HEAD)
f=$OUT/scale-6x240-$C.txt
cmd=(.venv/bin/python scripts/bench_scale.py --model embedded:smollm2-135m --pin --verify when_drawn
     --cycles 6 --phase-s 240)
{ echo "# commit $C start $(date -u +%FT%TZ)"; echo "# ${cmd[*]}"; "${cmd[@]}"; echo "# end $(date -u +%FT%TZ) rc $?"; } > "$f" 2>&1
