"""``swarmnode export``: a plain Hugging Face folder equal to base + adapter, a model
card from the node's records, and one-line refusals."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swarmnode.config import parse_config
from swarmnode.learn.checkpoint import Checkpointer
from swarmnode.learn.metrics import MetricsLog, RoundRecord, read_rounds
from swarmnode.learn.tasks import build_messages
from swarmnode.ops.evalreport import save_eval
from swarmnode.ops.model_card import model_card
from swarmnode.ops.nodedir import CheckpointRef
from tests.helpers import ENV, REPO, run_cli, tiny_config, write_config

CLI = (sys.executable, "-m", "swarmnode.cli")


def train_tiny(model_dir: Path, tmp: Path, rounds: int = 2) -> Path:
    """A data dir of a tiny node trained ``rounds`` rounds, a checkpoint every round."""
    data = tmp / "node"
    raw = tiny_config(model_dir, data, train={"learning_rate": 0.01, "format_reward_weight": 0.5})
    config = write_config(tmp / "node.yaml", raw)
    proc = subprocess.run(
        [*CLI, "start", "-c", str(config), "--max-rounds", str(rounds)],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert sum(r.groups_trained for r in read_rounds(data / "metrics.jsonl")) > 0
    return data


@pytest.fixture(scope="module")
def trained(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tiny(tiny_model_dir, tmp_path_factory.mktemp("export"))


@pytest.fixture(scope="module")
def exported(trained: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out") / "model"
    proc = run_cli("export", "--data-dir", str(trained), "--out", str(out))  # no --config
    assert proc.returncode == 0, proc.stderr
    assert "exported round 2" in proc.stdout
    return out


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits  # type: ignore[no-any-return]


def test_export_is_base_plus_adapter(tiny_model_dir: Path, trained: Path, exported: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(exported)
    model = AutoModelForCausalLM.from_pretrained(exported)
    assert next(model.parameters()).dtype == torch.float32
    config = json.loads((exported / "config.json").read_text())
    assert not any("quantization" in k for k in config)
    assert (exported / "model.safetensors").is_file()
    assert json.loads((exported / "generation_config.json").read_text())["do_sample"] is False
    prompt = tok.apply_chat_template(
        build_messages("What is 3 + 4?"),
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    # Base + adapter by another route: peft's own loading on a fresh base, unmerged.
    ckpt = trained / "checkpoints" / "round-000002"
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    base_logits = _logits(base, prompt)
    reference = PeftModel.from_pretrained(base, str(ckpt / "adapter"))
    ours, theirs = _logits(model, prompt), _logits(reference, prompt)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-4), (ours - theirs).abs().max()
    assert (ours - base_logits).abs().max() > 1e-3  # training moved the model
    # The adapter as it was, byte for byte.
    for f in (ckpt / "adapter").iterdir():
        assert (exported / "adapter" / f.name).read_bytes() == f.read_bytes()


def test_export_loads_without_swarmnode(exported: Path) -> None:
    code = (
        "import sys; from transformers import AutoModelForCausalLM, AutoTokenizer; "
        f"d = {str(exported)!r}; tok = AutoTokenizer.from_pretrained(d); "
        "m = AutoModelForCausalLM.from_pretrained(d); assert tok.chat_template; "
        "ids = tok.apply_chat_template([{'role': 'user', 'content': 'What is 2 + 2?'}], "
        "add_generation_prompt=True, return_tensors='pt', return_dict=True); "
        "out = m.generate(**ids); assert out.shape[1] > ids['input_ids'].shape[1]; "
        "print('swarmnode' in sys.modules, 'peft' in sys.modules)"
    )
    env = {k: v for k, v in ENV.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=exported,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False False"  # neither swarmnode nor peft needed


def test_card_says_what_the_node_did(trained: Path, exported: Path) -> None:
    card = (exported / "README.md").read_text()
    assert "# tiny: round 2" in card and "| Checkpoint | `round-000002` (2 rounds) |" in card
    assert "basic_arithmetic" in card and "none (the node trained alone)" in card
    assert "No held-out eval was run on this checkpoint" in card
    assert "learning_rate: 0.01" in card  # the resolved config
    assert (exported / "swarmnode.config.yaml").read_text() == (
        trained / "config.resolved.yaml"
    ).read_text()


def test_refusals_are_one_line(trained: Path, exported: Path, tmp_path: Path) -> None:
    def refused(*args: str) -> str:
        proc = run_cli("export", *args)
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        return proc.stderr

    assert "exists and is not empty" in refused("--data-dir", str(trained), "--out", str(exported))
    assert "not in" in refused(
        "--data-dir", str(trained), "--out", str(tmp_path / "a"), "--checkpoint", "round-9"
    )
    empty = tmp_path / "fresh"
    empty.mkdir()
    shutil.copy(trained / "config.resolved.yaml", empty)
    assert "no checkpoint" in refused("--data-dir", str(empty), "--out", str(tmp_path / "b"))
    # A flipped byte in the adapter: its hash no longer verifies.
    bad = tmp_path / "bad"
    shutil.copytree(trained, bad)
    weights = bad / "checkpoints" / "round-000002" / "adapter" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    err = refused("--data-dir", str(bad), "--out", str(tmp_path / "c"))
    assert "does not match its manifest hash" in err and "--checkpoint round-000001" in err
    assert not (tmp_path / "c").exists() and not list(tmp_path.glob(".c.export-*"))


def test_card_with_peers_levels_and_eval(tmp_path: Path) -> None:
    spec = {"name": "chain_sum", "levels": [{"min_terms": 3}, {"min_terms": 4}]}
    raw = tiny_config(
        tmp_path / "model",
        tmp_path,
        swarm={"enabled": True, "name": "lab"},
        tasks={"datasets": [spec, {"name": "basic_arithmetic"}]},
    )
    cfg = parse_config(raw)
    log = MetricsLog(tmp_path / "metrics.jsonl")
    by_round = [{"a": 2}, {"a": 1, "b": 3}, {"b": 5}, {"c": 9}]
    for k, peers in enumerate(by_round, start=1):
        log.write(
            RoundRecord(
                round=k,
                external_groups=sum(peers.values()),
                external_by_peer=peers,
                levels={"0:chain_sum": min(k, 2)},
            )
        )
    again = {"a": 1, "b": 3}  # round 2 logged twice (a resumed node): the last line counts
    log.write(
        RoundRecord(round=2, external_groups=4, external_by_peer=again, levels={"0:chain_sum": 1})
    )
    log.close()
    result = {
        "round": 3,
        "items": 4,
        "accuracy": 0.75,
        "interval": [0.3, 0.95],
        "per_dataset": {"chain_sum": {"items": 4, "accuracy": 0.75}},
    }
    base = {
        **result,
        "accuracy": 0.25,
        "interval": [0.05, 0.7],
        "per_dataset": {"chain_sum": {"items": 4, "accuracy": 0.25}},
    }
    paired = {"difference": 0.5, "interval": [0.0, 1.0], "better": 2, "worse": 0, "items": 4}
    save_eval(tmp_path, result, base, paired)
    card = model_card(cfg, CheckpointRef(3, tmp_path / "round-000003", {}), "llama")
    # Rounds 1-3 only (round 4 is after the checkpoint), round 2 once (its last line).
    assert "held 0 of the node's own groups and 11 from 2 peers" in card
    assert "| `b` | 8 |" in card and "| `a` | 3 |" in card and "`c`" not in card
    assert "| chain_sum | 1 | 3 | 2 | 2 |" in card  # levels: 3, at export 2, highest 2
    assert "| Swarm | `lab` |" in card
    assert "| all, 95% interval | 0.750 (0.300-0.950) | 0.250 (0.050-0.700) |" in card
    assert "+0.500 (95% bootstrap +0.000 to +1.000)" in card
    assert "| basic_arithmetic (no held-out items) | - | - |" in card  # eval had none
    assert "No held-out eval was run on this checkpoint (round 2)" in model_card(
        cfg, CheckpointRef(2, tmp_path / "x", {}), "llama"
    )


def test_checkpointer_and_export_agree_on_what_verifies(trained: Path, tmp_path: Path) -> None:
    from swarmnode.ops.nodedir import NodeDirError, find_checkpoint

    copy = tmp_path / "d"
    shutil.copytree(trained, copy)
    ckpt = find_checkpoint(copy)
    assert ckpt.round == 2 and ckpt.lora
    assert Checkpointer.verify(ckpt.path)["files"] == ckpt.files
    (ckpt.path / "rng.pt").write_bytes(b"tampered")
    with pytest.raises(NodeDirError, match=r"rng\.pt does not match"):
        find_checkpoint(copy)
    assert find_checkpoint(copy, "round-1").round == 1
