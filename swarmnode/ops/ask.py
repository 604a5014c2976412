"""``swarmnode ask``: what does the node's model answer now?

Loads the newest checkpoint of a data directory (LoRA merged in float32, as
``export`` writes it) or an export folder, asks one question with the node's chat
messages (``tasks.build_messages``: its system prompt and ``<answer>`` format) and
streams the completion to the terminal as it is decoded. ``--item DATASET`` asks a
task item instead and shows the verifier's score of the answer.

Invariants:
- Read-only on the data directory (``nodedir``): no lock, no file written, so it
  runs beside a training node; the checkpoint's weights are the bytes whose hashes
  verified, staged in a temporary folder outside the data directory.
- Decoding is greedy unless a temperature is given: the same model and question
  give the same answer, the answer ``swarmnode eval`` would score.
- An item is drawn at ``HELDOUT_SEED``, which no node trains on (ingestion refuses
  it), at the dataset's current curriculum level (``metrics.jsonl`` ``levels``;
  level 0 for an export).
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from swarmnode.config import Config, load_config
from swarmnode.errors import SwarmnodeError
from swarmnode.learn.groups import ItemRef
from swarmnode.learn.tasks import HELDOUT_SEED, build_messages, level_configs

EXPORT_CONFIG = "swarmnode.config.yaml"  # = export.CONFIG_NAME (no torch import here)


class AskError(SwarmnodeError):
    """Nothing to ask: no question, an unknown dataset, or no model folder."""


@dataclass
class Answerer:
    """A loaded model, its tokenizer and the config whose prompt and tasks it uses."""

    model: Any
    tokenizer: Any
    cfg: Config
    label: str  # what was loaded, for the header line


def from_data_dir(cfg: Config, checkpoint: str | None = None) -> Answerer:
    """The node's newest checkpoint (or ``round-N``), merged, on the CPU."""
    from swarmnode.ops.export import stage_weights, trained_model
    from swarmnode.ops.nodedir import find_checkpoint

    ckpt = find_checkpoint(Path(cfg.node.data_dir), checkpoint)
    stage = Path(tempfile.mkdtemp(prefix="swarmnode-ask-"))
    try:
        stage_weights(ckpt, stage)
        model, tokenizer = trained_model(cfg, ckpt, stage)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return Answerer(model, tokenizer, cfg, f"{cfg.node.name} checkpoint {ckpt.path.name}")


def from_export(folder: Path) -> Answerer:
    """An export folder; its ``swarmnode.config.yaml`` gives the prompt and tasks
    (the defaults when it has none)."""
    if not (folder / "config.json").is_file():
        raise AskError(f"--model {folder}: not a model folder (no config.json)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swarmnode.learn.model import ModelLoadError, quiet_transformers

    quiet_transformers()
    named = folder / EXPORT_CONFIG
    cfg = load_config(named) if named.is_file() else Config()
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"--model {folder}: cannot load it: {err}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    return Answerer(model, tokenizer, cfg, f"export {folder}")


def draw_item(
    cfg: Config, dataset: str, index: int | None = None, data_dir: Path | None = None
) -> tuple[ItemRef, dict[str, Any]]:
    """A task item of ``dataset`` (one of the node's) at ``HELDOUT_SEED``: index
    ``index`` or a random one, at the level ``data_dir``'s last round was at (level 0
    without a data dir: an export)."""
    from swarmnode.learn.metrics import read_rounds
    from swarmnode.learn.tasks import TaskError, regenerate

    names = [d.name for d in cfg.tasks.datasets]
    if dataset not in names:
        raise AskError(f"--item {dataset}: not one of this node's datasets ({', '.join(names)})")
    k = names.index(dataset)
    spec = cfg.tasks.datasets[k]
    level = 0
    if data_dir is not None:
        records = read_rounds(data_dir / "metrics.jsonl")
        level = records[-1].levels.get(f"{k}:{dataset}", 0) if records else 0
    configs = level_configs(spec)
    config = configs[min(max(level, 0), len(configs) - 1)]
    if index is None:
        index = random.randrange(spec.size)
    ref = ItemRef(dataset, config, HELDOUT_SEED, index)
    try:
        return ref, regenerate(ref)
    except TaskError as err:
        raise AskError(f"--item {dataset}: {err}") from None


def make_streamer(tokenizer: Any, out: TextIO) -> Any:
    """A ``TextStreamer`` writing decoded text to ``out`` as whole words arrive."""
    from transformers import TextStreamer

    class _Streamer(TextStreamer):
        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            out.write(text + ("\n" if stream_end else ""))
            out.flush()

    return _Streamer(tokenizer, skip_prompt=True, skip_special_tokens=True)


def answer(
    ans: Answerer,
    question: str,
    out: TextIO = sys.stdout,
    max_new_tokens: int | None = None,
    temperature: float = 0.0,
) -> str:
    """Ask ``question`` with the node's chat messages; stream and return the completion."""
    import torch

    tok, model = ans.tokenizer, ans.model
    messages = build_messages(question, ans.cfg.tasks.system_prompt)
    batch = tok.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    batch = {k: v.to(model.device) for k, v in batch.items()}
    sampling = (
        {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
    )
    with torch.inference_mode():
        ids = model.generate(
            **batch,
            max_new_tokens=max_new_tokens or ans.cfg.rollout.max_new_tokens,
            pad_token_id=tok.pad_token_id,
            streamer=make_streamer(tok, out),
            **sampling,
        )
    return str(tok.decode(ids[0][batch["input_ids"].shape[1] :], skip_special_tokens=True))


def verdict(completion: str, entry: dict[str, Any]) -> str:
    """The verifier's view of a completion: extracted answer, truth, score."""
    from swarmnode.learn.rewards import accuracy_reward, extract_answer

    score = accuracy_reward(completion, entry)
    right = "right" if score >= 1.0 else ("partly right" if score > 0 else "wrong")
    return (
        f"answer: {extract_answer(completion)!r}  expected: {str(entry['answer'])!r}  "
        f"score: {score:.3f} ({right})"
    )
