"""Task mix: stateless sampling, exact regeneration, and TaskError on any bad ref."""

from __future__ import annotations

import doctest
import json
import os
import random
import subprocess
import sys
from dataclasses import replace

import pytest
import reasoning_gym

from swarmnode.config import DatasetSpec, TasksConfig
from swarmnode.learn import tasks
from swarmnode.learn.groups import ItemRef
from swarmnode.learn.rewards import extract_answer, format_reward
from swarmnode.learn.tasks import (
    DEFAULT_EXAMPLES,
    DEFAULT_SYSTEM_PROMPT,
    MAX_SIZE,
    TaskError,
    TaskMix,
    build_messages,
    ref_config,
    regenerate,
)

ARITH = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def _mix(seed: int = 3) -> TaskMix:
    return TaskMix(
        TasksConfig(
            seed=seed,
            datasets=[
                DatasetSpec(name="chain_sum", weight=2.0, size=1000, config=ARITH),
                DatasetSpec(name="base_conversion", weight=1.0, size=500),
            ],
        )
    )


def _ref(**changes: object) -> ItemRef:
    base = ItemRef("chain_sum", {**ARITH, "size": 1000}, 3, 17)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_sample_is_deterministic_and_stateless() -> None:
    a, b = _mix(), _mix()
    assert a.sample(5, 8) == b.sample(5, 8)
    a.sample(6, 8)  # sampling another round leaves no state behind
    assert a.sample(5, 8) == b.sample(5, 8)
    assert a.sample(5, 8) != a.sample(6, 8)
    assert _mix(seed=4).sample(5, 8) != a.sample(5, 8)
    assert len(a.sample(0, 0)) == 0


def test_sample_shape_weights_and_distinct_items() -> None:
    mix = _mix()
    refs = [r for k in range(200) for r in mix.sample(k, 4)]
    assert all(len(mix.sample(k, 4)) == 4 for k in range(5))
    assert all(len(set(mix.sample(k, 16))) == 16 for k in range(5))
    counts = {name: sum(r.dataset == name for r in refs) for name in mix.datasets}
    assert 0.58 < counts["chain_sum"] / len(refs) < 0.75  # weight 2 of 3
    assert all(0 <= r.index < r.config["size"] for r in refs)
    assert all(r.seed == 3 and mix.knows(r) for r in refs)


def test_tiny_mix_still_returns_n_refs() -> None:
    mix = TaskMix(TasksConfig(datasets=[DatasetSpec(name="chain_sum", size=2)]))
    refs = mix.sample(0, 5)
    assert len(refs) == 5 and {r.index for r in refs} <= {0, 1}


def test_regenerate_equals_reasoning_gym_item() -> None:
    mix = _mix()
    for ref in mix.sample(1, 6):
        kwargs = dict(ref.config)
        original = reasoning_gym.create_dataset(ref.dataset, seed=ref.seed, **kwargs)[ref.index]
        again = mix.regenerate(ref)
        assert again["question"] == original["question"]
        assert again["answer"] == original["answer"]
        assert again["metadata"] == original["metadata"]


def test_ref_survives_the_wire() -> None:
    # Tuples in a YAML/Python config become lists: the ref is JSON-normal from the start.
    assert ref_config({"operators": ("+", "-")}, 9) == {"operators": ["+", "-"], "size": 9}
    mix = TaskMix(
        TasksConfig(
            datasets=[DatasetSpec(name="basic_arithmetic", config={"operators": ("+", "-")})]
        )
    )
    ref = mix.sample(0, 1)[0]
    wire = json.loads(json.dumps(ref.__dict__))
    assert regenerate(ItemRef(**wire)) == regenerate(ref)


def test_regeneration_is_the_same_in_another_process() -> None:
    # Peers regenerate in their own process, with their own hash seed.
    refs = _mix().sample(2, 4)
    code = (
        "import json,sys; from swarmnode.learn.groups import ItemRef; "
        "from swarmnode.learn.tasks import regenerate; "
        "print(json.dumps([regenerate(ItemRef(**d))['question'] for d in json.load(sys.stdin)]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([r.__dict__ for r in refs]),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout) == [regenerate(r)["question"] for r in refs]


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        (_ref(dataset="no_such_dataset"), "unknown"),
        (_ref(dataset=None), "unknown"),
        (_ref(config={**ARITH, "size": 1000, "bogus_key": 1}), "invalid config"),
        (_ref(config={**ARITH, "size": 1000, "min_terms": 0}), "invalid config"),
        (_ref(config={**ARITH, "size": 1000, "max_digits": "two"}), "invalid config"),
        (_ref(config={**ARITH, "size": 1000, "seed": 1}), "seed"),
        (_ref(config=ARITH), "size"),
        (_ref(config={**ARITH, "size": MAX_SIZE + 1}), "size"),
        (_ref(config={**ARITH, "size": 10**30}), "size"),
        (_ref(config={**ARITH, "size": True}), "size"),
        (_ref(config={**ARITH, "size": 0}), "size"),
        (_ref(config=[1, 2]), "mapping"),
        (_ref(config={1: 2, "size": 5}), "mapping"),
        (_ref(config={"size": 5, "x": float("nan")}), "JSON"),
        (_ref(config={"size": 5, "x": object()}), "JSON"),
        (_ref(config={"size": 5, "x": "y" * 5000}), "longer"),
        (_ref(index=1000), "outside"),
        (_ref(index=-1), "outside"),
        (_ref(index=True), "outside"),
        (_ref(index="3"), "outside"),
        (_ref(seed=-1), "seed"),
        (_ref(seed=2**64), "seed"),
        (_ref(seed=1.5), "seed"),
        ("chain_sum|{}|0|0", "ItemRef"),
    ],
)
def test_bad_refs_raise_task_error(ref: ItemRef, why: str) -> None:
    with pytest.raises(TaskError, match=why):
        regenerate(ref)


def test_random_garbage_refs_raise_only_task_error() -> None:
    rng = random.Random(0)
    names = ["chain_sum", "basic_arithmetic", "spell_backward", "bf", "nope", ""]
    values: list[object] = [0, -1, 1, 2**40, None, "x", 1.5, [1], {"a": 1}, True]
    for _ in range(300):
        config = {
            rng.choice(["size", "min_terms", "max_digits", "operators", "zz"]): v
            for v in rng.sample(values, 3)
        }
        if rng.random() < 0.7:
            config["size"] = rng.choice([1, 50, 10**6])
        ref = ItemRef(rng.choice(names), config, rng.choice([0, 7, -3]), rng.choice([0, 3, -1]))
        try:
            entry = regenerate(ref)
        except TaskError:
            continue
        assert isinstance(entry["question"], str)


def test_bad_mix_fails_at_construction() -> None:
    with pytest.raises(TaskError, match="invalid config"):
        TaskMix(TasksConfig(datasets=[DatasetSpec(name="chain_sum", config={"nope": 1})]))
    with pytest.raises(TaskError, match="unknown"):
        TaskMix(TasksConfig(datasets=[DatasetSpec(name="no_such_dataset")]))
    with pytest.raises(TaskError, match="seed"):
        TaskMix(TasksConfig(datasets=[DatasetSpec(name="chain_sum", config={"seed": 1})]))


def test_knows_only_its_own_datasets() -> None:
    mix = _mix()
    assert mix.knows(_ref())
    assert not mix.knows(_ref(config={**ARITH, "size": 999}))
    assert not mix.knows(_ref(dataset="basic_arithmetic"))


def test_build_messages() -> None:
    default = build_messages("What is 4 + 4?", None)
    assert default[0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    assert default[-1] == {"role": "user", "content": "What is 4 + 4?"}
    assert [m["role"] for m in default[1:-1]] == ["user", "assistant"] * len(DEFAULT_EXAMPLES)
    assert "<answer>" in DEFAULT_SYSTEM_PROMPT and "</answer>" in DEFAULT_SYSTEM_PROMPT
    # Every demonstration answer is in the format the rewards extract.
    for _question, answer in DEFAULT_EXAMPLES:
        assert extract_answer(answer) is not None and format_reward(answer) == 1.0
    custom = build_messages("q", "Be brief.")
    assert custom == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "q"}]


def test_doctests() -> None:
    result = doctest.testmod(tasks)
    assert result.attempted >= 3 and result.failed == 0
