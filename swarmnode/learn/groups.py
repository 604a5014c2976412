"""Rollout groups: the unit a round produces, gossip carries and the trainer consumes.

Invariants:
- An ``ItemRef`` (dataset, config, seed, index) names one reasoning-gym item; anyone
  with reasoning-gym can regenerate its question and answer from it, so no ground
  truth ever needs to travel. ``ItemRef.key`` is its canonical, hashable text form.
- A ``RolloutGroup`` holds one question and its G completions as *text*. Local groups
  also keep the exact sampled token ids (``completion_ids``) so the trainer scores the
  very tokens it sampled; external groups leave it ``None`` and are re-tokenised.
- ``rewards`` are always the rewards of the node holding the group: local groups are
  scored locally, external groups are re-scored on arrival (a sender's rewards are
  informational only).
- A group has learning signal only when its rewards spread by at least
  ``SIGNAL_MIN_STD`` (population std). reasoning-gym gives small partial credit
  (e.g. 0.01 for a wrong answer in the right place); std-normalised advantages would
  blow such a spread up to +-1 and train hard on noise, which is how a degrading
  peer's garbage used to pass the zero-advantage filter.
- ``finished[i]`` says whether completion i ended by itself (EOS) rather than at the
  token cap; ``None`` means unknown and counts as finished.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

LOCAL = "local"
REPLAY = "replay"  # the origin of this node's own past group, replayed (learn.replay)
# One completion out of 8 earning the 0.25 format reward alone is a std of 0.083;
# one earning 0.01 of partial credit is 0.003.
SIGNAL_MIN_STD = 0.05


def reward_std(rewards: Sequence[float]) -> float:
    """Population standard deviation of a group's rewards (0 for fewer than 2)."""
    return statistics.pstdev(rewards) if len(rewards) > 1 else 0.0


@dataclass(frozen=True)
class ItemRef:
    """The regenerable identity of one reasoning-gym item."""

    dataset: str
    config: dict[str, Any]
    seed: int
    index: int

    @property
    def config_key(self) -> str:
        """Canonical JSON of the config: equal configs, equal text."""
        return json.dumps(self.config, sort_keys=True, separators=(",", ":"))

    @property
    def key(self) -> str:
        """Canonical text form; equal items have equal keys."""
        return json.dumps([self.dataset, self.config_key, self.seed, self.index])

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ItemRef) and self.key == other.key


@dataclass
class RolloutGroup:
    """One question with its G completions and their rewards."""

    ref: ItemRef
    question: str
    completions: list[str]
    rewards: list[float]
    origin: str = LOCAL  # "local", "replay" (our own, from an earlier round), or a peer ID
    round: int = 0  # the producer's round number
    model: str = ""  # the producer's model name
    created: float = field(default_factory=time.time)  # unix seconds, when generated
    completion_ids: list[list[int]] | None = None  # exact sampled tokens (local only)
    format_rewards: list[float] | None = None  # format reward per completion, logged only
    finished: list[bool] | None = None  # per completion: ended with EOS (None = unknown)
    # per completion: sum of the sampled tokens' log-probs under the producer's policy
    # at its sampling temperature (None = not shared); for importance weights
    logprobs: list[float | None] | None = None

    @property
    def is_local(self) -> bool:
        """Made by this node this round (not replayed, not a peer's)."""
        return self.origin == LOCAL

    @property
    def is_replay(self) -> bool:
        """This node's own group from an earlier round (``learn.replay``)."""
        return self.origin == REPLAY

    @property
    def is_peer(self) -> bool:
        """Made by a peer (its ``origin`` is the sender's peer ID)."""
        return self.origin not in (LOCAL, REPLAY)

    @property
    def has_signal(self) -> bool:
        """False when the rewards barely differ (std < SIGNAL_MIN_STD): nothing to learn."""
        return reward_std(self.rewards) >= SIGNAL_MIN_STD
