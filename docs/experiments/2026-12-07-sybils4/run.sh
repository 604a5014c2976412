#!/usr/bin/env bash
# A fourth run of the two Sybil phases of bench_flood, six cycles of 240 s, the same
# command as ../2026-12-07-floods6/run-sybils.sh, on the commit after the relay's
# per-subnet slots and discovery's quick redial of known peers. Neither is what the
# bench measures: the victim serves no relay, and a Sybil that left is redialled at
# most every 30 s for 10 minutes (a refused dial on loopback), where it was every
# 2, 4, ... 300 s. Read alone, and pooled with the three runs before it.
set -u
cd "$(dirname "$0")/../../.."
OUT=docs/experiments/2026-12-07-sybils4
C=$(git rev-parse --short HEAD)
f=$OUT/flood-sybils-6x240-$C.txt
cmd=(.venv/bin/python scripts/bench_flood.py --model embedded:smollm2-135m --pin --verify when_drawn
     --phases calm,5sybil,5sybil_under --cycles 6 --phase-s 240)
{ echo "# commit $C start $(date -u +%FT%TZ)"; echo "# ${cmd[*]}"; "${cmd[@]}"; echo "# end $(date -u +%FT%TZ) rc $?"; } > "$f" 2>&1
