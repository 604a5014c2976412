"""Every kind of bad config: one line naming the field, exit code 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from swarmnode.config import ConfigError, load_config, parse_config

REPO = Path(__file__).resolve().parents[1]

BAD = [
    ("missing file", None, "config file not found"),
    ("not yaml", "model: [unclosed\n", "not valid YAML"),
    ("not a mapping", "- a\n- b\n", "top level must be a mapping"),
    ("unknown key", "rollout:\n  temprature: 0.7\n", "rollout.temprature: unknown key"),
    ("wrong type", "rollout:\n  max_new_tokens: lots\n", "rollout.max_new_tokens:"),
    ("out of range", "train:\n  learning_rate: -1\n", "train.learning_rate:"),
    ("bad enum", "model:\n  device: tpu\n", "model.device:"),
    ("empty mix", "tasks:\n  datasets: []\n", "tasks.datasets:"),
    (
        "curriculum that would flap",
        "tasks:\n  curriculum:\n    promote_at: 0.3\n    demote_at: 0.5\n",
        "tasks.curriculum.demote_at: must be below promote_at",
    ),
    (
        "kl without lora",
        "train:\n  kl_coef: 0.1\nmodel:\n  lora:\n    enabled: false\n",
        "train.kl_coef: a KL term needs model.lora.enabled",
    ),
    ("bad swarm name", "swarm:\n  name: 'has space'\n", "swarm.name:"),
    (
        "mesh bound below its degree",
        "swarm:\n  mesh_degree: 6\n  mesh_degree_high: 4\n",
        "swarm.mesh_degree_high: must be at least mesh_degree",
    ),
]


@pytest.mark.parametrize(("kind", "text", "expect"), BAD, ids=[b[0] for b in BAD])
def test_bad_config_one_line(tmp_path: Path, kind: str, text: str | None, expect: str) -> None:
    path = tmp_path / "node.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert expect in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("kind", "text", "expect"), BAD[:5] + BAD[8:10], ids=lambda x: str(x)[:20])
def test_cli_exit_code_2(tmp_path: Path, kind: str, text: str | None, expect: str) -> None:
    path = tmp_path / "node.yaml"
    if text is not None:
        path.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "swarmnode.cli", "start", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0] and "Traceback" not in proc.stderr


def test_shipped_configs_are_valid() -> None:
    paths = sorted((REPO / "configs").glob("*.yaml"))
    names = {p.name for p in paths}
    assert {"node.yaml", "gpu.yaml", "lan.yaml", "public.yaml", "bootstrap.yaml"} <= names
    for path in paths:
        load_config(path)


def test_defaults_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("rollout:\n  temperature: 0.7\n")
    cfg = load_config(path, {"node.max_rounds": 3, "node.data_dir": "/x"})
    assert cfg.rollout.temperature == 0.7 and cfg.node.max_rounds == 3
    assert cfg.node.data_dir == "/x" and cfg.train.max_grad_norm == 1.0
    assert parse_config({}).model.lora.enabled


def test_removed_keys_of_older_versions_are_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING"):
        cfg = parse_config({"train": {"clip_low": 0.2, "clip_high": 0.28, "learning_rate": 0.1}})
    assert cfg.train.learning_rate == 0.1
    assert "train.clip_low is no longer used" in caplog.text


def test_distinct_seeds_differ_per_identity_and_hold_across_restarts(tmp_path: Path) -> None:
    from swarmnode.config import dump_config, load_config
    from swarmnode.node import with_node_seeds

    def cfg(name: str, distinct: bool = True) -> Any:
        return parse_config(
            {
                "node": {"data_dir": str(tmp_path / name), "distinct_seeds": distinct},
                "tasks": {"seed": 3},
                "train": {"seed": 3},
            }
        )

    a, b = with_node_seeds(cfg("a")), with_node_seeds(cfg("b"))
    assert a.tasks.seed != b.tasks.seed and a.train.seed != b.train.seed
    again = with_node_seeds(cfg("a"))  # a restart: same identity, same seeds
    assert (again.tasks.seed, again.train.seed) == (a.tasks.seed, a.train.seed)
    dump_config(a, tmp_path / "resolved.yaml")  # the resolved config, reloaded
    reloaded = with_node_seeds(load_config(tmp_path / "resolved.yaml"))
    assert (reloaded.tasks.seed, reloaded.train.seed) == (a.tasks.seed, a.train.seed)
    off = with_node_seeds(cfg("c", distinct=False))
    assert (off.tasks.seed, off.train.seed) == (3, 3)
    assert not (tmp_path / "c" / "identity.key").exists()
