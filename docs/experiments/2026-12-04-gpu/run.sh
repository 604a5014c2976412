#!/usr/bin/env bash
# The second GPU check (2026-12-04), on a lent H200 with no network: what the CPU
# cannot show since the first one (docs/gpu.md).
#   1. The round bench on CUDA, swarmnode vs TRL in bf16, 8 questions x 8 x 256
#      tokens: the per-group update (packed_update off) and the packed one (on,
#      micro_batch_tokens 8192 as in configs/gpu.yaml), one run each.
#   2. The bf16 host-memory rise at configs/gpu.yaml's 512-token rounds: two nodes
#      at once on the GPU, bf16 (the default) and fp32, rss_mb per round.
# The embedded GGUF (98 MB) does not fit in what travels to the machine (64 MiB),
# so the model is SmolLM2-135M's config and tokenizer with random weights (same
# shapes and kernels; it never emits EOS, so every completion is full length, for
# both systems alike). Deps missing there travel as wheels in .gpu/whl, the config
# and tokenizer in .gpu/smol.tar.xz (both ignored by git). Output under $OUT.
#     bash docs/experiments/2026-12-04-gpu/run.sh          # on the device, ~8 min
set -u
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .gpu/whl/*.whl > "$OUT/pip.log" 2>&1 || { echo "pip failed"; tail -5 "$OUT/pip.log"; }
tar -xJf .gpu/smol.tar.xz -C /tmp
export PYTHONPATH=/tmp/site:$PWD PYTHONWARNINGS=ignore PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 - <<'PY'
import shutil, torch, transformers, peft, trl
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
print("torch", torch.__version__, "transformers", transformers.__version__, "peft",
      peft.__version__, "trl", trl.__version__, "cuda", torch.cuda.is_available())
torch.manual_seed(0)
AutoModelForCausalLM.from_config(AutoConfig.from_pretrained("/tmp/smol")).save_pretrained("/tmp/rand")
AutoTokenizer.from_pretrained("/tmp/smol").save_pretrained("/tmp/rand")
shutil.copy("/tmp/smol/chat_template.jinja", "/tmp/rand/")
shutil.copy("/tmp/smol/generation_config.json", "/tmp/rand/")
print("random SmolLM2-135M saved")
PY
echo "== 1. round bench on CUDA, 8 x 8 x 256, per-group then packed"
for mode in off on; do
  timeout 190 python3 scripts/bench_round.py --device cuda --model /tmp/rand --questions 8 \
    --max-new-tokens 256 --rounds 2 --warmup 1 --packed-update $mode --micro-batch-tokens 8192 \
    > "$OUT/bench-$mode.log" 2>&1
  echo "packed $mode: exit $?"; grep -E "^round|ratio=|Error" "$OUT/bench-$mode.log" | tail -6
done
echo "== 2. bf16 host memory at 512-token rounds: bf16 and fp32 nodes at once"
sed "s|^  name: Qwen/Qwen2.5-0.5B-Instruct|  name: /tmp/rand|" configs/gpu.yaml > /tmp/g.yaml
grep -n "name:\|max_new_tokens" /tmp/g.yaml | head -3
timeout 170 python3 -m swarmnode.cli start -c /tmp/g.yaml --max-rounds 40 --data-dir /tmp/d-bf16 \
  --set node.name=bf16 > "$OUT/node-bf16.log" 2>&1 &
timeout 170 python3 -m swarmnode.cli start -c /tmp/g.yaml --max-rounds 40 --data-dir /tmp/d-fp32 \
  --set node.name=fp32 --set model.dtype=float32 --set rollout.dtype=float32 \
  > "$OUT/node-fp32.log" 2>&1 &
wait
for tag in bf16 fp32; do
  echo "== $tag"; grep -E "Error|error" "$OUT/node-$tag.log" | tail -3
  cp /tmp/d-$tag/metrics.jsonl "$OUT/$tag-metrics.jsonl" 2>/dev/null
  python3 -c "
import json
rows=[json.loads(l) for l in open('/tmp/d-$tag/metrics.jsonl')]
print('rss_mb by round', ' '.join(f\"{r['round']}:{r['rss_mb']:.0f}\" for r in rows))
print('gen s', [round(r['gen_seconds'],1) for r in rows], 'tok', [r['tokens_generated'] for r in rows])"
done
