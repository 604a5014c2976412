#!/usr/bin/env bash
# Where does a CUDA node's RSS growth come from? Three nodes at once on one GPU, a
# randomly initialised SmolLM2-135M (same shapes and kernels as the real one),
# configs/gpu.yaml with 128-token completions: default, CUDA_MODULE_LOADING=EAGER,
# and fp32 weights (no bf16 sampling copy). /proc/PID/status sampled every 3 s.
# Note: the /proc sampling below read the `timeout` wrapper's PID, not the node's, so its
# rss.csv is not kept; the measure is the rss_mb each node writes per round (*-metrics.jsonl).
set -u
R=$1
mkdir -p /tmp/dev && tar -xJf .gpu/site.tar.xz -C /tmp/dev
export PYTHONPATH=/tmp/dev/site312:$PWD PYTHONWARNINGS=ignore HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
python3 -c "
import torch, shutil
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
cfg = AutoConfig.from_pretrained('.gpu/smol'); torch.manual_seed(0)
AutoModelForCausalLM.from_config(cfg).save_pretrained('/tmp/rand')
AutoTokenizer.from_pretrained('.gpu/smol').save_pretrained('/tmp/rand')
shutil.copy('.gpu/smol/chat_template.jinja', '/tmp/rand/')
print('random model saved')"
cp configs/gpu.yaml /tmp/g.yaml
sed -i "s|^  name: Qwen/Qwen2.5-0.5B-Instruct|  name: /tmp/rand|" /tmp/g.yaml
start() { tag=$1; shift; env "$@" timeout 170 python3 -m swarmnode.cli start -c /tmp/g.yaml \
  --set rollout.max_new_tokens=128 --set node.name=$tag --max-rounds 40 --data-dir /tmp/d-$tag $EXTRA > /tmp/$tag.log 2>&1 & }
EXTRA=""; start lazy X=1; PA=$!
EXTRA=""; start eager CUDA_MODULE_LOADING=EAGER; PB=$!
EXTRA="--set model.dtype=float32 --set rollout.dtype=float32"; start fp32 X=1; PC=$!
echo "t,tag,pid_rss_kb,anon_kb,file_kb,shmem_kb" > $R/rss.csv
t0=$(date +%s)
while kill -0 $PA 2>/dev/null || kill -0 $PB 2>/dev/null || kill -0 $PC 2>/dev/null; do
  for x in lazy:$PA eager:$PB fp32:$PC; do
    tag=${x%%:*}; pid=${x##*:}
    f=/proc/$pid/status; [ -r $f ] || continue
    awk -v t=$(( $(date +%s) - t0 )) -v tag=$tag '/^VmRSS/{a=$2}/^RssAnon/{b=$2}/^RssFile/{c=$2}/^RssShmem/{d=$2}END{print t","tag","a","b","c","d}' $f >> $R/rss.csv
  done
  sleep 3
done
for tag in lazy eager fp32; do
  echo "== $tag"; grep -E "^.?round|Error|error" /tmp/$tag.log | tail -3
  python3 -c "
import json
rows=[json.loads(l) for l in open('/tmp/d-$tag/metrics.jsonl')]
print(' '.join(f\"{r['round']}:{r['rss_mb']:.0f}\" for r in rows))
print('gen s', [round(r['gen_seconds'],1) for r in rows][:6], 'tok', [r['tokens_generated'] for r in rows][:3])"
  cp /tmp/d-$tag/metrics.jsonl $R/$tag-metrics.jsonl
done
awk -F, 'NR>1{last[$2]=$0} NR>1 && !($2 in first){first[$2]=$0} END{for(k in first) print "first", first[k]; for(k in last) print "last ", last[k]}' $R/rss.csv
