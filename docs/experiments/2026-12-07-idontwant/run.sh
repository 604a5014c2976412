#!/usr/bin/env bash
# Item 4 of issue 28 (a cheaper message heard) and item 5 (floods within 10%), on one
# commit, nothing else running:
# 1. the same flood read with and without gossipsub v1.2 (--idontwant: the victim as
#    it was before this commit), 2 cycles of 120 s each, on first;
# 2. the Sybil phases with the shipped defaults, 4 cycles of 240 s (as on e6a89c1;
#    one flooder, graylisted in 10 s, left out for time).
set -u
cd /work/main
OUT=docs/experiments/2026-12-07-idontwant
C=$(git rev-parse --short HEAD)
base=(.venv/bin/python scripts/bench_flood.py --model embedded:smollm2-135m --pin --verify when_drawn)
for arm in on off; do
  f=$OUT/ab-$arm-2x120-$C.txt
  flag=(); [ $arm = on ] && flag=(--idontwant)
  cmd=("${base[@]}" --phases calm,5sybil_under --cycles 2 --phase-s 120 "${flag[@]}")
  { echo "# commit $C start $(date -u +%FT%TZ)"; echo "# ${cmd[*]}"; "${cmd[@]}"; echo "# end $(date -u +%FT%TZ) rc $?"; } > "$f" 2>&1
done
f=$OUT/flood-4x240-$C.txt
cmd=("${base[@]}" --phases calm,5sybil,5sybil_under --cycles 4 --phase-s 240)
{ echo "# commit $C start $(date -u +%FT%TZ)"; echo "# ${cmd[*]}"; "${cmd[@]}"; echo "# end $(date -u +%FT%TZ) rc $?"; } > "$f" 2>&1
