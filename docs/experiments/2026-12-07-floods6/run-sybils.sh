#!/usr/bin/env bash
# A second run of the two Sybil phases, six cycles of 240 s, on the node code of
# 49572e2 and f9882ad (unchanged since under swarmnode/ but for reporting), after the
# 200-peer run: an independent reading of the same code, to read alone and pooled.
set -u
cd "$(dirname "$0")/../../.."
OUT=docs/experiments/2026-12-07-floods6
C=$(git rev-parse --short HEAD)
f=$OUT/flood-sybils-6x240-$C.txt
cmd=(.venv/bin/python scripts/bench_flood.py --model embedded:smollm2-135m --pin --verify when_drawn
     --phases calm,5sybil,5sybil_under --cycles 6 --phase-s 240)
{ echo "# commit $C start $(date -u +%FT%TZ)"; echo "# ${cmd[*]}"; "${cmd[@]}"; echo "# end $(date -u +%FT%TZ) rc $?"; } > "$f" 2>&1
