#!/usr/bin/env bash
# Five idle stock py-libp2p peers against a swarmnode transport publishing 2 batches a
# second (docs/experiments/2026-12-05-idle/): its libp2p thread's CPU with gossipsub
# v1.2 (IDONTWANT=1, the node before this change) and without, alternating.
cd /work/main
D=docs/experiments/2026-12-07-idontwant
C=$(git rev-parse --short HEAD)
for rep in 1 2; do
 for side in on off; do
  o=$D/raw-idle/$side$rep-$C.jsonl; mkdir -p $D/raw-idle
  [ $side = on ] && export IDONTWANT=1 || export IDONTWANT=0
  PYTHONPATH=/work/main WINDOW=15 taskset -c 0 .venv/bin/python docs/experiments/2026-12-05-idle/victim.py > $o 2>/dev/null &
  v=$!
  for i in $(seq 60); do grep -q addr $o && break; sleep 1; done
  addr=$(head -1 $o | python3 -c 'import json,sys; print(json.load(sys.stdin)["addr"])')
  sleep 16
  PYTHONPATH=/work/main taskset -c 1 .venv/bin/python docs/experiments/2026-12-05-idle/idlers.py $addr 5 60 > /dev/null 2>&1
  kill $v; wait $v 2>/dev/null
 done
done
