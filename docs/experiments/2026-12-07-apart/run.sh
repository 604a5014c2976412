#!/usr/bin/env bash
# Five Sybils under every rate against calm AND against the same five flooding a
# stand-in on their own core (5sybil_apart: the attack's CPU on the machine, none of its
# messages at the victim), six cycles of 240 s on one commit. The question: how much of
# the flood's round-time ratio is the node's own handling, and how much the attackers'
# load reaching the pinned victim through the shared 2-core machine.
set -u
cd "$(dirname "$0")/../../.."
OUT=docs/experiments/2026-12-07-apart
C=$(git rev-parse --short HEAD)
f=$OUT/flood-apart-6x240-$C.txt
cmd=(.venv/bin/python scripts/bench_flood.py --model embedded:smollm2-135m --pin --verify when_drawn
     --phases calm,5sybil_under,5sybil_apart --cycles 6 --phase-s 240)
{ echo "# commit $C start $(date -u +%FT%TZ)"; echo "# ${cmd[*]}"; "${cmd[@]}"; echo "# end $(date -u +%FT%TZ) rc $?"; } > "$f" 2>&1
