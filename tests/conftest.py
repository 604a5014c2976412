"""Shared fixtures: tiny models on disk (helpers that are not fixtures: ``tests.helpers``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from swarmnode.lab.tiny import make_tiny_model

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-qwen"), "qwen2", seed=1)
