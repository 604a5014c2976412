"""Run swarmnode nodes as local processes on loopback (for demo, soak and sapo_experiment).

Node 0 of a swarm is the others' bootstrap peer: its identity is made before it
starts, so the others know its peer ID in advance.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import yaml

from swarmnode.lab import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bootstrap_addr(data_dir: Path, port: int) -> str:
    """Create the node's identity in ``data_dir``; return its loopback multiaddr."""
    from swarmnode.p2p.identity import identity_path, load_or_create_identity, peer_id_of

    data_dir.mkdir(parents=True, exist_ok=True)
    key, _ = load_or_create_identity(identity_path(data_dir))
    return f"/ip4/127.0.0.1/tcp/{port}/p2p/{peer_id_of(key)}"


def node_base(
    base: dict[str, Any], name: str, data: Path, rounds: int, threads: int, model: str | None
) -> dict[str, Any]:
    """A copy of ``base`` as one node of a local run: its name, data dir, rounds, threads
    and (if given) model."""
    cfg: dict[str, Any] = yaml.safe_load(yaml.safe_dump(base))
    cfg["node"] = {**cfg.get("node", {}), "name": name, "data_dir": str(data), "max_rounds": rounds}
    cfg.setdefault("model", {})["threads"] = threads
    if model:
        cfg["model"]["name"] = model
    return cfg


def swarm_section(name: str, port: int, boot: str | None, enabled: bool = True) -> dict[str, Any]:
    return {
        "enabled": enabled,
        "name": name,
        "listen": [f"/ip4/127.0.0.1/tcp/{port}"],
        "bootstrap": [boot] if boot else [],
        "mdns": False,
    }


def start_node(
    cfg: dict[str, Any],
    path: Path,
    threads: int,
    stdout: int | IO[Any] | None,
    stderr: int | IO[Any] | None = None,
) -> subprocess.Popen[str]:
    """Write ``cfg`` to ``path`` and start `swarmnode start` on it (stderr defaults to
    stdout when that is a file)."""
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "swarmnode.cli",
            "start",
            "--config",
            str(path),
            "--log-level",
            "warning",
        ],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": str(threads)},
        stdout=stdout,
        stderr=stderr
        if stderr is not None
        else (subprocess.STDOUT if stdout not in (None, subprocess.PIPE) else None),
        text=True,
    )
