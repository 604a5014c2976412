#!/usr/bin/env bash
# A profile of the victim under 200 honest peers: one cycle of bench_scale, and py-spy
# (50 Hz, not stopping the process, on the other core) on the victim for 120 s from
# 60 s into the loaded phase. Not a timing run; it also gives the trainer's user and
# system CPU, minor faults and the garbage collector's CPU per round, calm and loaded.
set -u
cd /work/main
OUT=docs/experiments/2026-12-06-all-floods
C=$(git rev-parse --short HEAD)
f=$OUT/profile-scale-$C.txt
SPY=${SPY:-/tmp/pyspy/bin/py-spy}  # pip install --target /tmp/pyspy py-spy
cmd=(.venv/bin/python scripts/bench_scale.py --model embedded:smollm2-135m --pin --verify when_drawn --cycles 1 --phase-s 200)
{
  echo "# commit $C start $(date -u +%FT%TZ)"
  echo "# ${cmd[*]}"
  "${cmd[@]}" &
  bench=$!
  until grep -q "^calm0 {" "$f" 2>/dev/null; do sleep 2; kill -0 $bench || break; done
  sleep 60
  pid=$(pgrep -f "bench-scale-.*/node.yaml" | head -1)
  echo "# py-spy on $pid from $(date -u +%FT%TZ)"
  taskset -c 1 "$SPY" record -p "$pid" --nonblocking --threads -r 50 -d 120 --format raw \
    -o "$OUT/profile-scale-$C.collapsed" > /tmp/pyspy.log 2>&1
  echo "# py-spy rc $? $(tail -1 /tmp/pyspy.log)"
  gzip -9 "$OUT/profile-scale-$C.collapsed"
  wait $bench
  echo "# end $(date -u +%FT%TZ) rc $?"
} >> "$f" 2>&1
