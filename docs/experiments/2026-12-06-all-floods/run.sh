#!/usr/bin/env bash
# Every flood phase, then 200 honest peers, on one commit, one after the other, nothing else running.
set -u
cd /work/main
OUT=docs/experiments/2026-12-06-all-floods
C=$(git rev-parse --short HEAD)
run() {  # name, then the bench's command
  local f=$OUT/$1-$C.txt; shift
  {
    echo "# commit $C start $(date -u +%FT%TZ)"
    echo "# $*"
    "$@"
    echo "# end $(date -u +%FT%TZ) rc $?"
  } > "$f" 2>&1
}
run flood-4x240 .venv/bin/python scripts/bench_flood.py --model embedded:smollm2-135m --pin --verify when_drawn --phases calm,1peer,5sybil,5sybil_under --cycles 4 --phase-s 240
run scale-3x240 .venv/bin/python scripts/bench_scale.py --model embedded:smollm2-135m --pin --verify when_drawn --cycles 3 --phase-s 240
