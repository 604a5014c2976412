#!/usr/bin/env bash
# The trainer's page faults against glibc's mmap threshold (the node's 4 MiB, 32 and
# 256 MiB), 6 rounds of configs/node.yaml per process, two processes per arm, alternating.
set -u
cd /work/main
D=docs/experiments/2026-12-07-mmap
C=$(git rev-parse --short HEAD)
f=$D/mmap-ab-$C.txt
{ echo "# commit $C start $(date -u +%FT%TZ)"; .venv/bin/python $D/mmap_ab.py --rounds 6 --arms 4,32,256 --repeat 2; echo "# end $(date -u +%FT%TZ) rc $?"; } > "$f" 2>&1
