#!/usr/bin/env bash
# Item 5 of issue 28: every flood phase (one flooder, five Sybils, five Sybils under
# every rate) on one commit with the shipped defaults, six cycles of 240 s so that
# each interval is about +-5% (four cycles gave +-5.2-5.6% on f9882ad). Nothing else
# runs on the machine meanwhile.
set -u
cd "$(dirname "$0")/../../.."
OUT=docs/experiments/2026-12-07-floods6
C=$(git rev-parse --short HEAD)
f=$OUT/flood-6x240-$C.txt
cmd=(.venv/bin/python scripts/bench_flood.py --model embedded:smollm2-135m --pin --verify when_drawn
     --phases calm,1peer,5sybil,5sybil_under --cycles 6 --phase-s 240)
{ echo "# commit $C start $(date -u +%FT%TZ)"; echo "# ${cmd[*]}"; "${cmd[@]}"; echo "# end $(date -u +%FT%TZ) rc $?"; } > "$f" 2>&1
