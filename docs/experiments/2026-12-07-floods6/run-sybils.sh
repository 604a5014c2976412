#!/usr/bin/env bash
# A second run of the two Sybil phases, six cycles of 240 s, after the 200-peer run:
# the node code of 49572e2 and f9882ad plus the relay's slot rules and the liveness
# config fields (82a6e50), neither of which this bench exercises (the victim serves
# no relay; the ping defaults are unchanged). Read alone, and pooled with the others.
set -u
cd "$(dirname "$0")/../../.."
OUT=docs/experiments/2026-12-07-floods6
C=$(git rev-parse --short HEAD)
f=$OUT/flood-sybils-6x240-$C.txt
cmd=(.venv/bin/python scripts/bench_flood.py --model embedded:smollm2-135m --pin --verify when_drawn
     --phases calm,5sybil,5sybil_under --cycles 6 --phase-s 240)
{ echo "# commit $C start $(date -u +%FT%TZ)"; echo "# ${cmd[*]}"; "${cmd[@]}"; echo "# end $(date -u +%FT%TZ) rc $?"; } > "$f" 2>&1
