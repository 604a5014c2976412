#!/usr/bin/env bash
# The fair-sharing sweep (issue 27), in resumable pieces, every arm on one commit.
# Step 1, the learning-rate check: none, self-replay and heavy-pos at 1x, 2x, 0.5x and
# 0.25x of train.learning_rate, seed 0, 4 nodes, 40 rounds, configs/specialties.yaml
# (0.25x added when every lone arm did best at 0.5x, the grid's edge; SCALES="..."
# runs only those scales).
# Each finished run's raw data is exported beside this script and committed at once,
# so a stopped session loses at most the run in progress (--resume continues it).
#   git worktree add ../sweep 09fc62e            # the sweep's commit, for every arm
#   bash docs/experiments/2026-12-02-fair/run.sh ../sweep   # from the main checkout
set -uo pipefail
main=$(cd "$(dirname "$0")/../../.." && pwd)
tree=$(cd "${1:?the sweep worktree}" && pwd)
here=$main/docs/experiments/2026-12-02-fair
py=$main/.venv/bin/python
rounds=${ROUNDS:-40}
for scale in ${SCALES:-1 2 0.5 0.25}; do
  for arm in self-replay none heavy-pos; do
    out=$main/runs/fair/lr$scale
    (cd "$tree" && PYTHONPATH=$tree "$py" scripts/sapo_experiment.py \
      --base configs/specialties.yaml --rounds "$rounds" --seed-list 0 \
      --configs "$arm" --lr-scale "$scale" --resume --out "$out") \
      >> "$here/sweep.log" 2>&1 || { echo "$arm lr$scale failed" >> "$here/sweep.log"; continue; }
    (cd "$tree" && PYTHONPATH=$tree "$py" scripts/sapo_experiment.py --aggregate \
      --rounds "$rounds" --configs none,self-replay,heavy-pos --out "$out" \
      --export-raw "$here/lr$scale/raw") >> "$here/sweep.log" 2>&1
    cp "$out/results.md" "$here/lr$scale/results.md" 2>/dev/null
    # a piece that had landed before (resumed, nothing run) has nothing new to commit
    [ -n "$(cd "$main" && git status --porcelain -- "$here/lr$scale")" ] || continue
    for try in 1 2 3 4 5; do
      (cd "$main" && git add "$here/lr$scale" "$here/sweep.log" && git commit -q \
        -m "#27 sweep raw data: $arm at lr x$scale, seed 0, $rounds rounds (commit of the runs: $(git -C "$tree" rev-parse --short HEAD))" \
        -- "$here/lr$scale" "$here/sweep.log") && break
      sleep 7
    done
  done
done
