"""Tasks: a weighted mix of reasoning-gym datasets, and exact regeneration of items.

An item is named by an ``ItemRef`` (dataset, config, seed, index). Its ``config`` is
the dataset's keyword arguments *including* ``"size"`` (the dataset spec's size),
and never ``"seed"`` (that is ``ref.seed``). So the item is exactly::

    reasoning_gym.create_dataset(ref.dataset, seed=ref.seed, **ref.config)[ref.index]

Size is part of the identity because a few datasets (e.g. ``acre``) draw different
items for the same index when the size differs.

Invariants:
- ``TaskMix.sample`` is a pure function of (tasks.seed, round index, n): a resumed
  node continues with the same items and there is no sampler state to checkpoint.
- Ref configs are JSON-normal (lists, not tuples): what a peer receives over the
  wire regenerates the item the sender saw.
- ``regenerate`` raises ``TaskError`` and nothing else, whatever the ref holds
  (unknown dataset, bad config keys or values, out-of-range index, huge sizes).
- Dataset objects are cached in a bounded LRU (``CACHE_SIZE`` entries).
- ``SharedSchedule.items`` is a pure function of (swarm name, time bucket, position):
  every node of a swarm with the same datasets draws the same items in the same
  bucket. Its seed (``schedule_seed``) is below 2**31 like every training seed.
- Held out by construction: ``is_heldout(question, percent)`` depends on the
  question's text alone, so every node with the same ``tasks.heldout_percent`` agrees
  on the partition whatever seed or index names the item. ``TaskMix.sample`` and
  ``SharedSchedule.items`` never return a held-out item (a slot with no other item
  left is dropped rather than filled with one).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from swarmnode.config import DatasetSpec, TasksConfig
from swarmnode.learn.groups import ItemRef

# Held-out items (evaluate.py) use this seed; training seeds are below 2**31 and
# ingestion refuses peers' groups at or above it.
HELDOUT_SEED = 2**31 + 7919
MAX_SIZE = 10_000_000  # same bound as DatasetSpec.size
MAX_SEED = 2**32  # reasoning-gym seeds are 32-bit in practice
MAX_CONFIG_CHARS = 4096  # a ref's config as JSON; anything longer is refused
CACHE_SIZE = 64
HELDOUT_TRIES = 20  # draws per wanted item before a mostly held-out mix gives up

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. Give only the final answer, between <answer> and </answer> tags."
)
# Demonstration turns sent with the default prompt. A 135M instruct model ignores a
# format *instruction* almost always, but copies a demonstrated format (measured on
# SmolLM2-135M-Instruct Q4_1, temperature 1: ~2% -> ~25% of completions tagged).
# Generic on purpose: a number, a word and a True/False answer.
DEFAULT_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("What is 2 + 3?", "<answer>5</answer>"),
    ("Spell the word 'cat' backward.", "<answer>tac</answer>"),
    ("Is 7 smaller than 3? Answer True or False.", "<answer>False</answer>"),
)


def is_heldout(question: str, percent: int) -> bool:
    """True when ``question`` lies in the held-out ``percent`` of the question space.

    >>> is_heldout("What is 2 + 3?", 0)
    False
    >>> is_heldout("What is 2 + 3?", 100)
    True
    >>> sum(is_heldout(f"q{i}", 10) for i in range(10_000))  # about 10%
    1028
    """
    if percent <= 0:
        return False
    digest = hashlib.sha256(question.encode("utf-8")).hexdigest()
    return int(digest[:8], 16) % 100 < percent


class TaskError(Exception):
    """An item that cannot be produced: bad ref, unknown dataset or invalid config."""


def _dataset_names() -> frozenset[str]:
    import reasoning_gym

    return frozenset(reasoning_gym.factory.DATASETS)


def ref_config(config: dict[str, Any], size: int) -> dict[str, Any]:
    """The config an ``ItemRef`` carries: the dataset kwargs plus ``size``, JSON-normal.

    >>> ref_config({"operators": ("+", "-")}, 100)
    {'operators': ['+', '-'], 'size': 100}
    """
    if "seed" in config or "size" in config:
        raise TaskError("dataset config must not set 'seed' or 'size' (use tasks.seed, size)")
    try:
        normal = json.loads(json.dumps({**config, "size": size}, sort_keys=True))
    except (TypeError, ValueError) as err:
        raise TaskError(f"dataset config is not JSON-serialisable: {err}") from None
    assert isinstance(normal, dict)
    return normal


def _check_ref(ref: object) -> tuple[str, str, int, int]:
    """Validate a ref's fields; return (dataset, canonical config JSON, seed, index)."""
    if not isinstance(ref, ItemRef):
        raise TaskError(f"not an ItemRef: {type(ref).__name__}")
    name, config, seed, index = ref.dataset, ref.config, ref.seed, ref.index
    if not isinstance(name, str) or name not in _dataset_names():
        raise TaskError(f"unknown reasoning-gym dataset {str(name)[:64]!r}")
    if not isinstance(config, dict) or not all(isinstance(k, str) for k in config):
        raise TaskError(f"{name}: config must be a mapping with string keys")
    try:
        text = json.dumps(config, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        raise TaskError(f"{name}: config is not plain JSON") from None
    if len(text) > MAX_CONFIG_CHARS:
        raise TaskError(f"{name}: config longer than {MAX_CONFIG_CHARS} characters")
    if "seed" in config:
        raise TaskError(f"{name}: config must not hold 'seed' (it is the ref's seed)")
    size = config.get("size")
    if type(size) is not int or not 1 <= size <= MAX_SIZE:
        raise TaskError(f"{name}: config.size must be an integer in [1, {MAX_SIZE}]")
    if type(seed) is not int or not 0 <= seed < MAX_SEED:
        raise TaskError(f"{name}: seed must be an integer in [0, 2**32)")
    if type(index) is not int or not 0 <= index < size:
        raise TaskError(f"{name}: index {index!r} outside [0, {size})")
    return name, text, seed, index


def preload() -> None:
    """Import reasoning-gym now: its import takes seconds (more while a model loads), a
    one-off cost that a caller with a time budget (ingestion) pays before counting."""
    import reasoning_gym  # noqa: F401


@lru_cache(maxsize=CACHE_SIZE)
def _dataset(name: str, config_json: str, seed: int) -> Any:
    """Build (once per LRU slot) the dataset object; raises TaskError."""
    import reasoning_gym

    kwargs = json.loads(config_json)
    try:
        return reasoning_gym.create_dataset(name, seed=seed, **kwargs)
    except Exception as err:  # TypeError (bad key), AssertionError/ValueError (bad value), ...
        raise TaskError(f"{name}: invalid config: {type(err).__name__}: {err}"[:300]) from None


def regenerate(ref: ItemRef) -> dict[str, Any]:
    """The reasoning-gym entry (question, answer, metadata) that ``ref`` names.

    Raises ``TaskError`` (and only that) when the ref cannot name an item.
    """
    name, config_json, seed, index = _check_ref(ref)
    dataset = _dataset(name, config_json, seed)
    try:
        entry = dataset[index]
    except Exception as err:  # a generator bug on this index: the item does not exist
        raise TaskError(
            f"{name}[{index}]: generation failed: {type(err).__name__}: {err}"[:300]
        ) from None
    if not isinstance(entry, dict) or not isinstance(entry.get("question"), str):
        raise TaskError(f"{name}[{index}]: generator returned no question")
    return entry


def build_messages(question: str, system_prompt: str | None = None) -> list[dict[str, str]]:
    """Chat messages for one question.

    ``None`` means the default: ``DEFAULT_SYSTEM_PROMPT`` followed by the
    ``DEFAULT_EXAMPLES`` as user/assistant turns. A custom system prompt is sent
    alone (its author decides the format, so no demonstration is imposed).

    >>> [m["role"] for m in build_messages("What is 1 + 1?")]
    ['system', 'user', 'assistant', 'user', 'assistant', 'user', 'assistant', 'user']
    >>> build_messages("What is 1 + 1?", "Be brief.")
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'What is 1 + 1?'}]
    """
    if system_prompt is not None:
        return [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": question},
        ]
    shots = [
        {"role": role, "content": text}
        for q, a in DEFAULT_EXAMPLES
        for role, text in (("user", q), ("assistant", a))
    ]
    return [
        {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
        *shots,
        {"role": "user", "content": question},
    ]


def level_configs(spec: DatasetSpec) -> list[dict[str, Any]]:
    """Ref configs of a dataset's levels: ``config``, then each of ``levels`` over it.

    >>> spec = DatasetSpec(name="chain_sum", size=10, config={"min_terms": 2},
    ...                    levels=[{"min_terms": 3}])
    >>> level_configs(spec)
    [{'min_terms': 2, 'size': 10}, {'min_terms': 3, 'size': 10}]
    """
    return [ref_config(spec.config, spec.size)] + [
        ref_config({**spec.config, **level}, spec.size) for level in spec.levels
    ]


class TaskMix:
    """The weighted dataset mix of one node (``TasksConfig``)."""

    def __init__(self, cfg: TasksConfig) -> None:
        self.seed = cfg.seed
        self.system_prompt = cfg.system_prompt
        self.datasets = [d.name for d in cfg.datasets]
        self.level_configs = [level_configs(d) for d in cfg.datasets]
        self.levels = [0] * len(self.datasets)  # moved by curriculum.Curriculum
        self.weights = [d.weight for d in cfg.datasets]
        self.heldout_percent = cfg.heldout_percent
        # Build each dataset now: a bad name or config fails at start, not mid-run.
        for name, configs in zip(self.datasets, self.level_configs, strict=True):
            for config in configs:
                regenerate(ItemRef(name, config, self.seed, 0))

    @property
    def configs(self) -> list[dict[str, Any]]:
        """Each dataset's config at its current level."""
        return [c[lvl] for c, lvl in zip(self.level_configs, self.levels, strict=True)]

    def dataset_of(self, ref: ItemRef) -> int | None:
        """Index of the dataset whose current-level config ``ref`` names, else None."""
        for k, (name, config) in enumerate(zip(self.datasets, self.configs, strict=True)):
            if ref.dataset == name and ref.config == config:
                return k
        return None

    def sample(self, round_index: int, n: int) -> list[ItemRef]:
        """``n`` item refs for a round; the same (seed, round_index, n) gives the same refs.

        Refs within a round are distinct whenever the mix holds enough items.
        """
        rng = random.Random(f"swarmnode:{self.seed}:{round_index}")
        refs: list[ItemRef] = []
        seen: set[str] = set()
        for _ in range(max(0, n)):
            ref: ItemRef | None = None
            for _attempt in range(20):  # a tiny mix may run out of distinct items
                k = rng.choices(range(len(self.datasets)), weights=self.weights)[0]
                index = rng.randrange(self.configs[k]["size"])
                candidate = ItemRef(self.datasets[k], self.configs[k], self.seed, index)
                if self.is_heldout(candidate):
                    continue
                ref = candidate
                if ref.key not in seen:
                    break
            if ref is None:  # every draw was held out: the slot stays empty
                continue
            seen.add(ref.key)
            refs.append(ref)
        return refs

    def is_heldout(self, ref: ItemRef) -> bool:
        """True when ``ref``'s question is in the held-out partition (``is_heldout``)."""
        if self.heldout_percent <= 0:
            return False
        return is_heldout(regenerate(ref)["question"], self.heldout_percent)

    def knows(self, ref: ItemRef) -> bool:
        """True when ``ref`` names an item of this mix (same dataset, one of its levels'
        configs; any seed)."""
        return any(
            ref.dataset == name and ref.config in configs
            for name, configs in zip(self.datasets, self.level_configs, strict=True)
        )

    def regenerate(self, ref: ItemRef) -> dict[str, Any]:
        """See module-level ``regenerate``."""
        return regenerate(ref)

    def messages(self, question: str) -> list[dict[str, str]]:
        """Chat messages with this mix's system prompt (or the default)."""
        return build_messages(question, self.system_prompt)


def schedule_seed(swarm: str) -> int:
    """The dataset seed of a swarm's shared schedule (below 2**31, like training seeds).

    >>> schedule_seed("lab") == schedule_seed("lab") != schedule_seed("other")
    True
    """
    digest = hashlib.blake2b(f"swarmnode-schedule:{swarm}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % 2**31


class SharedSchedule:
    """Items that every node of a swarm asks in the same time bucket.

    Time is cut into buckets of ``period_s`` seconds; bucket b holds an endless,
    deterministic list of items drawn from the swarm name and b. A node takes the
    next unused items of the current bucket each round, so nodes that run rounds at
    a similar pace answer the same questions at about the same time, and their
    answers can complete each other's groups (see ``completion``). The datasets are
    this node's own at their current curriculum level, in a canonical order and with
    equal weight, so nodes with the same datasets and levels (whatever their
    weights) agree on the schedule.
    """

    def __init__(
        self,
        swarm: str,
        mix: TaskMix,
        period_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.swarm = swarm
        self.seed = schedule_seed(swarm)
        self.mix = mix
        # Canonical order by each dataset's level-0 config: the same on every node.
        self.order = sorted(
            range(len(mix.datasets)),
            key=lambda k: (mix.datasets[k], json.dumps(mix.level_configs[k][0], sort_keys=True)),
        )
        self.period_s = period_s
        self.clock = clock
        self._bucket: int | None = None
        self._cursor = 0

    def items(self, bucket: int, start: int, n: int) -> list[ItemRef]:
        """Items ``start .. start + n - 1`` of ``bucket`` (pure)."""
        rng = random.Random(f"swarmnode-schedule:{self.swarm}:{bucket}")
        configs = self.mix.configs  # each dataset at this node's current level
        refs: list[ItemRef] = []
        for _ in range(HELDOUT_TRIES * (start + n)):  # bounded, in a mostly held-out mix
            if len(refs) == start + n:
                break
            k = self.order[rng.randrange(len(self.order))]
            config = configs[k]
            ref = ItemRef(self.mix.datasets[k], config, self.seed, rng.randrange(config["size"]))
            if not self.mix.is_heldout(ref):
                refs.append(ref)
        return refs[start:]

    def next(self, n: int) -> list[ItemRef]:
        """The next ``n`` unused items of the current bucket."""
        if n <= 0:
            return []
        bucket = int(self.clock() // self.period_s)
        if bucket != self._bucket:
            self._bucket, self._cursor = bucket, 0
        refs = self.items(bucket, self._cursor, n)
        self._cursor += n
        return refs
