"""A node's data directory as the operator commands read it (``eval``, ``export``, ``ask``).

Role: find the config a node ran with and the checkpoint to use, and read that
checkpoint's files exactly as its manifest hashed them.

Invariants:
- Read-only: nothing here writes into the data directory, takes its lock or talks
  to a running node, so every reader works while the node trains.
- ``--data-dir D`` alone means ``D/config.resolved.yaml`` (what the node ran with,
  its seeds included), with ``node.data_dir`` set to ``D`` (the folder may have been
  moved since); ``--config F`` is the file, ``--data-dir`` overriding its data_dir.
- ``read_verified`` returns the bytes it hashed: a file replaced between the check
  and the use cannot slip through (a running node prunes and rewrites checkpoints).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmnode.config import Config, load_config, parse_overrides
from swarmnode.errors import SwarmnodeError

RESOLVED = "config.resolved.yaml"
_NAME = re.compile(r"^(?:round-)?(\d+)$")


class NodeDirError(SwarmnodeError):
    """The data directory lacks what the command needs (config, checkpoint), or a
    checkpoint does not verify."""


def node_config(
    config: Path | None, data_dir: Path | None, sets: list[str] | None = None
) -> Config:
    """The config of the node whose data directory the command reads (see module doc)."""
    overrides: dict[str, Any] = parse_overrides(sets or [])
    if data_dir is not None:
        overrides["node.data_dir"] = str(data_dir)
    if config is not None:
        return load_config(config, overrides)
    if data_dir is None:
        raise NodeDirError("give --config or --data-dir")
    resolved = data_dir / RESOLVED
    if not resolved.is_file():
        why = "no such directory" if not data_dir.is_dir() else f"no {RESOLVED} in it"
        raise NodeDirError(f"--data-dir {data_dir}: {why} (has a node run there? else --config)")
    return load_config(resolved, overrides)


@dataclass(frozen=True)
class CheckpointRef:
    """A checkpoint whose manifest was read: its round, folder and file hashes."""

    round: int
    path: Path
    files: dict[str, str]  # relative path -> SHA-256 hex

    @property
    def lora(self) -> bool:
        return "adapter/adapter_model.safetensors" in self.files


def _manifest(path: Path) -> CheckpointRef:
    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        files = {str(k): str(v) for k, v in manifest["files"].items()}
        return CheckpointRef(int(manifest["round"]), path, files)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise NodeDirError(f"checkpoint {path.name}: unreadable manifest ({err})") from None


def read_verified(ckpt: CheckpointRef, name: str) -> bytes:
    """The bytes of ``name`` in ``ckpt``, once their SHA-256 matches the manifest."""
    digest = ckpt.files.get(name)
    if digest is None:
        raise NodeDirError(f"checkpoint {ckpt.path.name}: {name} is not in its manifest")
    try:
        data = (ckpt.path / name).read_bytes()
    except OSError as err:
        raise NodeDirError(f"checkpoint {ckpt.path.name}: cannot read {name} ({err})") from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise NodeDirError(
            f"checkpoint {ckpt.path.name}: {name} does not match its manifest hash (corrupt)"
        )
    return data


def verify(ckpt: CheckpointRef) -> None:
    """Every file of ``ckpt`` matches its hash, else NodeDirError naming the first that
    does not."""
    for name in ckpt.files:
        read_verified(ckpt, name)


def find_checkpoint(data_dir: Path, name: str | None = None) -> CheckpointRef:
    """The checkpoint named ``round-N`` (or ``N``), else the newest; verified.

    The newest is taken as it is: when it does not verify, the error says so and
    names the older ones instead of exporting an older model unasked.
    """
    root = data_dir / "checkpoints"
    found = (
        sorted(
            ((int(m.group(1)), p) for p in root.glob("round-*") if (m := _NAME.match(p.name))),
            reverse=True,
        )
        if root.is_dir()
        else []
    )
    if not found:
        raise NodeDirError(f"{data_dir}: no checkpoint in {root} (has the node saved one?)")
    if name is None:
        chosen = found[0][1]
    else:
        m = _NAME.match(name.strip())
        if m is None:
            raise NodeDirError(f"--checkpoint {name!r}: expected round-N, e.g. round-12")
        wanted = [p for k, p in found if k == int(m.group(1))]
        if not wanted:
            have = ", ".join(p.name for _, p in found)
            raise NodeDirError(f"--checkpoint {name}: not in {root} (there: {have})")
        chosen = wanted[0]
    ckpt = _manifest(chosen)
    try:
        verify(ckpt)
    except NodeDirError as err:
        older = [p.name for _, p in found if p != chosen]
        hint = f"; give --checkpoint {older[0]} for an older one" if older else ""
        raise NodeDirError(f"{err}{hint}") from None
    return ckpt
