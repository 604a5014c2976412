#!/usr/bin/env bash
# Five Sybils under every rate on loopback (5sybil_under) against the same five from a
# network namespace of their own, across a veth pair, each side's received packets
# processed on its own CPU (5sybil_far, swarmnode/lab/farlink.py), and calm; six cycles
# of 240 s on one commit. The question: does loopback, where a sender's kernel runs the
# receiver's TCP input, make the node's share of the flood look cheaper or dearer than
# it would be with the attackers on machines of their own? Needs root.
set -u
cd "$(dirname "$0")/../../.."
OUT=docs/experiments/2026-12-08-far
C=$(git rev-parse --short HEAD)
f=$OUT/flood-far-6x240-$C.txt
cmd=(.venv/bin/python scripts/bench_flood.py --model embedded:smollm2-135m --pin --verify when_drawn
     --phases calm,5sybil_under,5sybil_far --cycles 6 --phase-s 240)
{ echo "# commit $C start $(date -u +%FT%TZ)"; echo "# ${cmd[*]}"; "${cmd[@]}"; echo "# end $(date -u +%FT%TZ) rc $?"; } > "$f" 2>&1
