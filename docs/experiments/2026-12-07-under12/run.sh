#!/usr/bin/env bash
# One long run of the phase no single run had met: five Sybils each under every rate,
# against calm, twelve cycles of 240 s (the runs before had four or six cycles of three
# phases). Same bench and flags as ../2026-12-07-sybils4/run.sh; node code unchanged
# since that run but for tests and docs (e970566).
set -u
cd "$(dirname "$0")/../../.."
OUT=docs/experiments/2026-12-07-under12
C=$(git rev-parse --short HEAD)
f=$OUT/flood-under-12x240-$C.txt
cmd=(.venv/bin/python scripts/bench_flood.py --model embedded:smollm2-135m --pin --verify when_drawn
     --phases calm,5sybil_under --cycles 12 --phase-s 240)
{ echo "# commit $C start $(date -u +%FT%TZ)"; echo "# ${cmd[*]}"; "${cmd[@]}"; echo "# end $(date -u +%FT%TZ) rc $?"; } > "$f" 2>&1
