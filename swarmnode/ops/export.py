"""``swarmnode export``: a node's checkpoint as a plain Hugging Face model folder.

The folder loads with ``AutoModelForCausalLM.from_pretrained(DIR)`` and
``AutoTokenizer.from_pretrained(DIR)`` where only transformers is installed:
- ``model.safetensors`` + ``config.json``: the LoRA adapter merged into the base in
  float32 (with full fine-tuning, the checkpoint's own weights);
- the tokenizer with its chat template, and a ``generation_config.json`` that decodes
  greedily (as ``swarmnode eval`` scores) up to the node's ``rollout.max_new_tokens``;
- ``adapter/``: the PEFT adapter exactly as the checkpoint holds it (LoRA only);
- ``swarmnode.config.yaml``: the config the node ran with (``swarmnode ask --model``
  reads its prompt and tasks from it); ``README.md``: the model card (``model_card``).

Invariants:
- The weights exported are the bytes whose SHA-256 matched the checkpoint manifest
  (``nodedir.read_verified``); a checkpoint that does not verify is refused.
- ``config.json`` carries no ``quantization_config`` (a GGUF-loaded base has one,
  and a loader without the GGUF quantizer would refuse it).
- The folder is built in a hidden sibling and renamed into place: an interrupted
  export leaves no half-written ``--out``. An ``--out`` that exists and is not an
  empty folder is refused, never overwritten.
- Read-only on the data directory: exporting while the node trains is safe.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmnode.config import Config, dump_config
from swarmnode.errors import SwarmnodeError
from swarmnode.ops.nodedir import CheckpointRef, NodeDirError, find_checkpoint, read_verified

CONFIG_NAME = "swarmnode.config.yaml"
_FULL_WEIGHTS = ".checkpoint-model.safetensors"  # staged name: save_pretrained writes its own


class ExportError(SwarmnodeError):
    """The export folder cannot be written where asked."""


@dataclass(frozen=True)
class Exported:
    """What ``export`` wrote."""

    out: Path
    round: int
    lora: bool
    files: list[str]


def stage_weights(ckpt: CheckpointRef, folder: Path) -> None:
    """Write the checkpoint's weight files into ``folder`` from their verified bytes:
    ``adapter/*`` with LoRA, else the full weights under ``_FULL_WEIGHTS``."""
    if ckpt.lora:
        for name in (n for n in ckpt.files if n.startswith("adapter/")):
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(read_verified(ckpt, name))
    else:
        (folder / _FULL_WEIGHTS).write_bytes(read_verified(ckpt, "model.safetensors"))


def _base(cfg: Config) -> tuple[Any, Any]:
    """The untrained base in float32 on the CPU, and the node's tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    from swarmnode.learn.model import (
        ModelLoadError,
        load_tokenizer,
        quiet_transformers,
        resolve_source,
    )

    quiet_transformers()
    source = resolve_source(cfg.model)
    try:
        tokenizer = load_tokenizer(source)
        base = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"model.name: cannot load {cfg.model.name!r}: {err}") from None
    return base, tokenizer


def trained_model(cfg: Config, ckpt: CheckpointRef, staged: Path) -> tuple[Any, Any]:
    """(model, tokenizer): the base with the checkpoint's weights, LoRA merged, float32.

    ``staged`` holds the files ``stage_weights`` wrote for ``ckpt``.
    """
    base, tokenizer = _base(cfg)
    where = f"checkpoint {ckpt.path.name}"
    if ckpt.lora:
        from peft import PeftConfig, get_peft_model, set_peft_model_state_dict
        from safetensors.torch import load_file

        try:
            adapter = staged / "adapter"
            model = get_peft_model(base, PeftConfig.from_pretrained(str(adapter)))
            weights = load_file(str(adapter / "adapter_model.safetensors"))
            result: Any = set_peft_model_state_dict(model, weights)
        except (OSError, ValueError, RuntimeError, KeyError, TypeError) as err:
            msg = f"{where}: adapter does not load on {cfg.model.name}: {err}"
            raise NodeDirError(msg) from None
        missing = [k for k in result.missing_keys if "lora_" in k]
        if result.unexpected_keys or missing:
            raise NodeDirError(f"{where}: adapter does not match the base {cfg.model.name}")
        merged: Any = model.merge_and_unload()
    else:
        from safetensors.torch import load_model

        try:
            load_model(base, str(staged / _FULL_WEIGHTS))
        except (OSError, ValueError, RuntimeError) as err:
            raise NodeDirError(f"{where}: weights do not fit {cfg.model.name}: {err}") from None
        merged = base
    if hasattr(merged.config, "quantization_config"):
        delattr(merged.config, "quantization_config")
    merged.config.use_cache = True
    merged.eval()
    return merged, tokenizer


def generation_config(model: Any, tokenizer: Any, cfg: Config) -> Any:
    """Greedy decoding (what ``swarmnode eval`` scores), stopping where the node stops."""
    from transformers import GenerationConfig

    eos = {int(tokenizer.eos_token_id)}
    extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if extra is not None:
        eos |= {int(e) for e in (extra if isinstance(extra, list) else [extra])}
    return GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=sorted(eos) if len(eos) > 1 else next(iter(eos)),
        pad_token_id=int(tokenizer.pad_token_id),
        max_new_tokens=cfg.rollout.max_new_tokens,
        do_sample=False,
    )


def check_out(out: Path) -> None:
    """Refuse an ``--out`` that exists and is not an empty folder."""
    if out.is_dir():
        if any(out.iterdir()):
            raise ExportError(f"--out {out}: exists and is not empty (give a new folder)")
    elif out.exists():
        raise ExportError(f"--out {out}: exists and is not a folder")


def _permissions(root: Path) -> None:
    """Modes as the umask gives a new file (mkdtemp and safetensors make them private)."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [root, *root.rglob("*")]:
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


def export(cfg: Config, out: Path, checkpoint: str | None = None) -> Exported:
    """Write the export of the node's checkpoint (newest, or ``round-N``) to ``out``."""
    from swarmnode.ops.model_card import model_card

    check_out(out)
    data_dir = Path(cfg.node.data_dir)
    ckpt = find_checkpoint(data_dir, checkpoint)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=out.parent))
    except OSError as err:
        raise ExportError(f"--out {out}: cannot write there ({err})") from None
    try:
        stage_weights(ckpt, stage)
        model, tokenizer = trained_model(cfg, ckpt, stage)
        (stage / _FULL_WEIGHTS).unlink(missing_ok=True)
        model.save_pretrained(stage)
        tokenizer.save_pretrained(stage)
        generation_config(model, tokenizer, cfg).save_pretrained(stage)
        dump_config(cfg, stage / CONFIG_NAME)
        card = model_card(cfg, ckpt, model.config.model_type)
        (stage / "README.md").write_text(card, encoding="utf-8")
        files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file())
        _permissions(stage)
        try:
            if out.is_dir():
                out.rmdir()  # empty (checked above); fails if something arrived since
            stage.rename(out)
        except OSError as err:
            raise ExportError(f"--out {out}: cannot put the export there ({err})") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return Exported(out=out, round=ckpt.round, lora=ckpt.lora, files=files)
