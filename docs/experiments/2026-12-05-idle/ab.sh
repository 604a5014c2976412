# A/B: victim from /tmp/before (HEAD) vs /work/main (working tree), 5 idle stock peers
cd /work/main
for rep in 1 2 3; do
 for side in before after; do
  repo=/work/main; [ $side = before ] && repo=/tmp/before
  PYTHONPATH=$repo WINDOW=15 taskset -c 0 .venv/bin/python /tmp/probe/victim.py > /tmp/probe/v_$side$rep.out 2>/dev/null &
  v=$!
  for i in $(seq 60); do grep -q addr /tmp/probe/v_$side$rep.out && break; sleep 1; done
  addr=$(head -1 /tmp/probe/v_$side$rep.out | python3 -c 'import json,sys; print(json.load(sys.stdin)["addr"])')
  sleep 16
  PYTHONPATH=/work/main taskset -c 1 .venv/bin/python /tmp/probe/idlers.py $addr 5 75 > /dev/null 2>&1
  kill $v; wait $v 2>/dev/null
 done
done
