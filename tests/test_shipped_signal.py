"""Every shipped trainer config learns out of the box: each of its datasets gives signal.

A dataset on which the embedded model is never right (or always right) gives groups
whose rewards are all equal: nothing to learn, and peers' groups of it are refused as
``no_signal``. This happened: configs/lan.yaml and public.yaml once trained on
basic_arithmetic at its default difficulty, where SmolLM2-135M scores 0. So for each
(dataset, config) of each shipped trainer config, the untrained embedded model samples
G completions for a few items, as a round does, and some group must carry signal.
(configs/gpu.yaml names a hub model and bootstrap.yaml trains nothing: not checked.)
"""

from __future__ import annotations

import json

import pytest

from swarmnode.config import EMBEDDED_MODEL, load_config
from swarmnode.learn.evaluate import probe_signal
from swarmnode.learn.model import load_policy
from tests.helpers import REPO

pytestmark = pytest.mark.slow

SHIPPED = ("node.yaml", "lan.yaml", "public.yaml", "specialties.yaml")
ITEMS = 16  # a dataset at 4% strict accuracy has signal in a group of 8 ~27% of the time


def shipped_datasets() -> dict[str, tuple[str, str]]:
    """(dataset name, config JSON) -> (first config file naming it, dataset name)."""
    seen: dict[str, tuple[str, str]] = {}
    for name in SHIPPED:
        cfg = load_config(REPO / "configs" / name)
        assert cfg.model.name == EMBEDDED_MODEL, name
        for spec in cfg.tasks.datasets:
            key = json.dumps([spec.name, spec.config, spec.size], sort_keys=True)
            seen.setdefault(key, (name, spec.name))
    return seen


def test_each_shipped_dataset_gives_signal_on_the_embedded_model() -> None:
    policy = None
    found = {}
    for key, (file, dataset) in shipped_datasets().items():
        name, config, size = json.loads(key)
        cfg = load_config(
            REPO / "configs" / file,
            {
                "tasks.datasets": [{"name": name, "config": config, "size": size}],
                "rollout.questions_per_round": ITEMS,
                "model.threads": 2,
            },
        )
        if policy is None:
            policy = load_policy(cfg.model, seed=0)
        probe = probe_signal(cfg, policy, ITEMS)
        found[f"{file}:{dataset}"] = probe["signal"]
    silent = [name for name, share in found.items() if share == 0]
    assert not silent, f"no signal in {ITEMS} groups: {silent} (all: {found})"
