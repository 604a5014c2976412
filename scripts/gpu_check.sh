#!/usr/bin/env bash
# GPU check, in one go: what only a CUDA machine can show.
#   1. configs/gpu.yaml alone on CUDA in bf16 (model.name from $MODEL: the embedded
#      SmolLM2 by default, or any Hugging Face id / local folder), $ROUNDS rounds;
#      per-round gen/train seconds, tokens and reward, and the GPU memory seen by
#      nvidia-smi every 0.5 s.
#   2. The round bench (scripts/bench_round.py) on CUDA: swarmnode vs TRL in bf16,
#      at the CPU bench's size and at 8 questions x 256 tokens.
#   3. A 3-node demo swarm (scripts/demo.py) on one GPU with the same config.
# Each step has its own time limit and a failed step does not stop the next.
# Logs and metrics go under $OUT (default runs/gpu-check).
#
#     MODEL=embedded:smollm2-135m ROUNDS=4 bash scripts/gpu_check.sh
set -u
cd "$(dirname "$0")/.."
PY=${PY:-python3}
MODEL=${MODEL:-embedded:smollm2-135m}
ROUNDS=${ROUNDS:-4}
OUT=${OUT:-runs/gpu-check}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import torch, transformers, peft; print('torch', torch.__version__, \
'transformers', transformers.__version__, 'peft', peft.__version__, \
'cuda', torch.cuda.is_available())"
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader \
    -lms 500 > "$OUT/smi.csv" 2>/dev/null &
SMI=$!

cp configs/gpu.yaml "$OUT/gpu-embedded.yaml"
sed -i "s|^  name: Qwen/Qwen2.5-0.5B-Instruct|  name: $MODEL|" "$OUT/gpu-embedded.yaml"

echo "== 1. configs/gpu.yaml on CUDA, model $MODEL, $ROUNDS rounds"
t0=$(date +%s)
timeout 170 $PY -m swarmnode.cli start -c "$OUT/gpu-embedded.yaml" --max-rounds "$ROUNDS" \
    --data-dir "$OUT/gpu-node" > "$OUT/gpu-node.log" 2>&1
echo "exit $? after $(( $(date +%s) - t0 )) s"
grep -E "^round|error|Error" "$OUT/gpu-node.log" | tail -n "$(( ROUNDS + 3 ))"
$PY - "$OUT/gpu-node/metrics.jsonl" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for r in rows:
    print(f"round {r['round']}: gen {r['gen_seconds']:.1f}s ({r['tokens_generated']} tok, "
          f"{r['tokens_generated'] / max(r['gen_seconds'], 1e-9):.0f} tok/s) train "
          f"{r['train_seconds']:.1f}s ({r['tokens_trained']} tok, {r['groups_trained']} groups) "
          f"reward {r['reward_mean']:.3f} rss {r.get('rss_mb', 0):.0f} MB")
EOF
kill $SMI 2>/dev/null
sort -t, -k2 -n "$OUT/smi.csv" | tail -1 | sed 's/^/peak GPU memory (nvidia-smi): /'

echo "== 2. round bench on CUDA"
timeout 90 $PY scripts/bench_round.py --device cuda --rounds 4 > "$OUT/bench-small.log" 2>&1
echo "exit $?"; grep -E "^round|ratio=" "$OUT/bench-small.log"
timeout 110 $PY scripts/bench_round.py --device cuda --rounds 3 --questions 8 \
    --max-new-tokens 256 > "$OUT/bench-8x256.log" 2>&1
echo "exit $?"; grep -E "^round|ratio=" "$OUT/bench-8x256.log"

echo "== 3. 3-node demo swarm on one GPU"
timeout 140 $PY scripts/demo.py --nodes 3 --rounds 3 --config "$OUT/gpu-embedded.yaml" \
    --out "$OUT/demo" > "$OUT/demo.log" 2>&1
echo "exit $?"; tail -n 8 "$OUT/demo.log"
