"""Shared fixtures: tiny models on disk and configs that use them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests.tiny import make_tiny_model

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-qwen"), "qwen2", seed=1)


def tiny_config(model_dir: Path, data_dir: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    """A node config dict for a tiny model: 2 questions x 4 completions, short outputs."""
    cfg: dict[str, Any] = {
        "node": {"name": "tiny", "data_dir": str(data_dir)},
        "model": {"name": str(model_dir), "device": "cpu", "lora": {"rank": 4, "alpha": 8}},
        "tasks": {
            "datasets": [
                {
                    "name": "basic_arithmetic",
                    "config": {
                        "min_terms": 2,
                        "max_terms": 2,
                        "min_digits": 1,
                        "max_digits": 1,
                        "operators": ["+"],
                        "allow_parentheses": False,
                        "allow_negation": False,
                    },
                }
            ]
        },
        "rollout": {
            "questions_per_round": 2,
            "completions_per_question": 4,
            "max_new_tokens": 8,
            "dtype": "float32",
        },
        "train": {"learning_rate": 0.01},
        "checkpoint": {"every_rounds": 1},
    }
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    return cfg


def write_config(path: Path, cfg: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path
