#!/usr/bin/env bash
# Step 2 of the fair-sharing sweep (issue 27), after the learning-rate check (run.sh):
# each arm at its own best scale, 60 rounds, configs/specialties.yaml, 4 nodes a run;
# heavy-pos 5 swarms (seeds 0-4), none and self-replay 3 runs each (seeds 0-2); then
# the no-harm check on configs/node.yaml's easy tasks (heavy-pos vs none, 2 each,
# 40 rounds); then nodes of different specialties (step 3, below). Same commit as
# step 1 (09fc62e), resumable, each finished run's raw data exported and committed at
# once, as in run.sh. Interleaved by seed so that a stopped
# session leaves every arm with about as many runs.
#   bash docs/experiments/2026-12-02-fair/run_main.sh ../sweep
# Each arm runs at its best scale in the learning-rate check (the highest cumulative
# reward per node in lr*/results.md), or at SCALE_NONE / SCALE_SELF / SCALE_HP if set.
# The scales are recorded in each run.json and in sweep.log.
set -uo pipefail
main=$(cd "$(dirname "$0")/../../.." && pwd)
tree=$(cd "${1:?the sweep worktree}" && pwd)
here=$main/docs/experiments/2026-12-02-fair
py=$main/.venv/bin/python
best() {  # arm: the scale whose lr<scale>/results.md has its highest cumulative reward
  for d in "$here"/lr*/; do
    awk -F'|' -v arm=" $1 " -v s="$(basename "$d" | cut -c3-)" \
      '$2 == arm && $5 ~ /[0-9]/ {print $5 + 0, s; exit}' "$d/results.md" 2>/dev/null
  done | sort -rn | head -1 | cut -d' ' -f2
}
declare -A scale=([none]=${SCALE_NONE:-$(best none)} [self-replay]=${SCALE_SELF:-$(best self-replay)}
  [heavy-pos]=${SCALE_HP:-$(best heavy-pos)})
for arm in none self-replay heavy-pos; do
  [ -n "${scale[$arm]}" ] || { echo "no learning-rate check result for $arm" >&2; exit 2; }
  echo "$arm at lr x${scale[$arm]}" >> "$here/sweep.log"
done

piece() {  # base rounds arm seed out_name [extra sapo_experiment flags, also aggregated]
  local base=$1 rounds=$2 arm=$3 seed=$4 name=$5
  local extra=("${@:6}")
  local out=$main/runs/fair/$name
  if [ -d "$here/$name/raw" ]; then  # runs/ is not kept: lay out what already landed
    (cd "$tree" && PYTHONPATH=$tree "$py" scripts/sapo_experiment.py --aggregate \
      --rounds "$rounds" --configs none,self-replay,heavy-pos --out "$out" "${extra[@]}" \
      --import-raw "$here/$name/raw") >> "$here/sweep.log" 2>&1
  fi
  (cd "$tree" && PYTHONPATH=$tree "$py" scripts/sapo_experiment.py \
    --base "$base" --rounds "$rounds" --seed-list "$seed" \
    --configs "$arm" --lr-scale "${scale[$arm]}" --resume --out "$out" "${extra[@]}") \
    >> "$here/sweep.log" 2>&1 || { echo "$name $arm s$seed failed" >> "$here/sweep.log"; return; }
  (cd "$tree" && PYTHONPATH=$tree "$py" scripts/sapo_experiment.py --aggregate \
    --rounds "$rounds" --configs none,self-replay,heavy-pos --out "$out" "${extra[@]}" \
    --export-raw "$here/$name/raw") >> "$here/sweep.log" 2>&1
  cp "$out/results.md" "$here/$name/results.md" 2>/dev/null
  # a piece that had landed before (resumed, nothing run) has nothing new to commit
  [ -n "$(cd "$main" && git status --porcelain -- "$here/$name")" ] || return 0
  for try in 1 2 3 4 5; do
    (cd "$main" && git add "$here/$name" "$here/sweep.log" && git commit -q \
      -m "#27 sweep raw data: $name, $arm at lr x${scale[$arm]}, seed $seed, $rounds rounds (commit of the runs: $(git -C "$tree" rev-parse --short HEAD))" \
      -- "$here/$name" "$here/sweep.log") && break
    sleep 7
  done
}

for seed in 0 1 2 3 4; do  # the shortest piece first: a session that stops mid-seed lands it
  [ "$seed" -le 2 ] && piece configs/specialties.yaml 60 none "$seed" main60
  piece configs/specialties.yaml 60 heavy-pos "$seed" main60
  [ "$seed" -le 2 ] && piece configs/specialties.yaml 60 self-replay "$seed" main60
done
for seed in 0 1; do
  piece configs/node.yaml 40 heavy-pos "$seed" easy40
  piece configs/node.yaml 40 none "$seed" easy40
done
# Step 3: where peers bring what a node cannot replay (issue 27: if sharing does not beat
# self-replay): nodes of different specialties (--hetero 6: each node draws 75% of its
# items from its own dataset of the three), heavy-pos against self-replay, 60 rounds:
# heavy-pos 5 swarms (seeds 0-4), self-replay 3 runs (12 lone nodes), as in main60.
# heavy-pos first in each seed: the shorter piece (40-60 min against 90+ on a quiet
# machine), so a session that stops mid-seed lands one of the pair.
# Base: specialties-fp32.yaml (sampling pinned to float32, what 'auto' gave on the
# machines of main60 and easy40; the first hetero60 machine had bf16 instructions).
for seed in 0 1 2 3 4; do
  piece "$here/specialties-fp32.yaml" 60 heavy-pos "$seed" hetero60 --hetero 6
  [ "$seed" -le 2 ] && piece "$here/specialties-fp32.yaml" 60 self-replay "$seed" hetero60 --hetero 6
done
