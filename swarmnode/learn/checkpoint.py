"""Atomic checkpoints that a restarted node resumes from.

Layout: ``<data_dir>/checkpoints/round-000012/`` holds
- ``adapter/`` (PEFT format: adapter_config.json + adapter_model.safetensors) with
  LoRA, or ``model.safetensors`` (every weight) with full fine-tuning;
- ``optimizer.pt`` (AdamW state), ``rng.pt`` (sampling generator and global RNGs);
- ``manifest.json``, written last: round number, time, and the SHA-256 of every file.

Invariants:
- A checkpoint is built in a hidden temporary folder, fsynced, then renamed into
  place: a crash leaves either the whole checkpoint or none of it.
- ``restore_latest`` checks the manifest and every hash before loading; a corrupt,
  partial or unloadable checkpoint is reported and the previous one is used.
- Loading never unpickles arbitrary objects (``torch.load(weights_only=True)``).
- Only the newest ``keep`` checkpoints remain.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import shutil
import time
from pathlib import Path
from typing import Any, cast

import torch
from safetensors.torch import load_file, load_model, save_model

log = logging.getLogger(__name__)

_NAME = re.compile(r"^round-(\d{6,})$")


class CheckpointError(Exception):
    """A checkpoint failed verification or loading."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Checkpointer:
    """Saves and restores (model weights, optimizer, RNG, round) under ``root``."""

    def __init__(self, root: Path, keep: int = 3) -> None:
        self.root = root
        self.keep = keep

    def checkpoints(self) -> list[tuple[int, Path]]:
        """Finished checkpoints, newest first."""
        if not self.root.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.root.iterdir() if (m := _NAME.match(p.name))]
        return sorted(found, reverse=True)

    def save(
        self,
        round_index: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        generator: torch.Generator,
    ) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / f"round-{round_index:06d}"
        tmp = self.root / f".tmp-{final.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            if hasattr(model, "peft_config"):
                cast(Any, model).save_pretrained(tmp / "adapter")
            else:
                save_model(model, str(tmp / "model.safetensors"))
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save(
                {
                    "generator": generator.get_state(),
                    "torch": torch.get_rng_state(),
                    "python": random.getstate(),
                },
                tmp / "rng.pt",
            )
            files = {
                str(p.relative_to(tmp)): _sha256(p) for p in sorted(tmp.rglob("*")) if p.is_file()
            }
            manifest = {"round": round_index, "time": time.time(), "files": files}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
            _fsync_tree(tmp)
            if final.exists():  # re-saving the same round (e.g. at shutdown): replace it
                shutil.rmtree(final)
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self._prune()
        return final

    def _prune(self) -> None:
        for _, path in self.checkpoints()[self.keep :]:
            shutil.rmtree(path, ignore_errors=True)
        for stale in self.root.glob(".tmp-*"):
            if not stale.name.endswith(f"-{os.getpid()}"):
                shutil.rmtree(stale, ignore_errors=True)

    @staticmethod
    def verify(path: Path) -> dict[str, Any]:
        """The manifest of a complete, untampered checkpoint, else CheckpointError."""
        try:
            manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
            files = manifest["files"]
            round_index = int(manifest["round"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise CheckpointError(f"{path.name}: unreadable manifest ({err})") from None
        for name, digest in files.items():
            f = path / name
            if not f.is_file() or _sha256(f) != digest:
                raise CheckpointError(f"{path.name}: {name} is missing or corrupt")
        return {"round": round_index, "files": files}

    def restore_latest(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        generator: torch.Generator,
    ) -> int | None:
        """Load the newest valid checkpoint; return its round, or None if there is none."""
        for _, path in self.checkpoints():
            try:
                manifest = self.verify(path)
                self._load(path, model, optimizer, generator)
            except (CheckpointError, OSError, RuntimeError, ValueError, KeyError) as err:
                log.warning("skipping checkpoint %s: %s", path.name, err)
                continue
            log.info("resumed from %s", path.name)
            return int(manifest["round"])
        return None

    @staticmethod
    def _load(
        path: Path,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        generator: torch.Generator,
    ) -> None:
        if hasattr(model, "peft_config"):
            from peft import set_peft_model_state_dict

            weights = load_file(str(path / "adapter" / "adapter_model.safetensors"))
            result = set_peft_model_state_dict(model, weights)
            if getattr(result, "unexpected_keys", None):
                raise CheckpointError(f"{path.name}: adapter does not match the model")
        else:
            load_model(model, str(path / "model.safetensors"))
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
        rng = torch.load(path / "rng.pt", weights_only=True)
        generator.set_state(rng["generator"])
        torch.set_rng_state(rng["torch"])
        random.setstate(_as_tuple(rng["python"]))


def _as_tuple(state: Any) -> Any:
    """random.getstate() is nested tuples; keep it that way after a round trip."""
    if isinstance(state, list | tuple):
        return tuple(_as_tuple(s) for s in state)
    return state
