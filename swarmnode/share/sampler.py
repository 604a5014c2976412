"""The swarm sampler: which groups go into this round's policy update.

``uniform`` (the paper): I local groups from this round plus J external groups drawn
uniformly from what the swarm shared last: the newest round each peer has in the
ingestion queue. Older rounds are drawn from (newest first) only when those run out:
a queue holds many rounds, and a group several rounds old was sampled by a policy
further from both its sender's and ours. Every queued group already carries signal
after local re-scoring (the zero-advantage filter the open-source implementation lacks).
When fewer than J external groups exist, the update fills up with more of this
round's local groups (if the round made more than I) and reports the shortfall.

Both modes draw per peer, not per group: within a round tier a group's weight is its
peer's weight divided by how many groups that peer has in the tier, so a peer that
sends 64 groups a round gets no more slots than one that sends 2. A peer's weight
grows with the square of its tenure (how long ago the queue took its first group,
``IngestQueue.tenure``; full weight at ``sapo.peer_tenure_s``), and the peers not yet
at full weight that began together share it: together they weigh one peer of their
age (``peer_weights``). Identities created for a flood stand behind the peers the node
already knows, however many they are. With equal peers this is the paper's uniform
draw.

``adaptive`` (beyond the paper): the same budget B = I + J, spent where the signal is.
- Balance: local groups without signal would be skipped by the update anyway, so
  their slots go to external groups; external slots nobody can fill go back to local
  groups. At least ``ceil(B / 4)`` slots stay local whenever local groups have signal,
  because the paper saw training oscillate when nodes leaned mostly on others.
- Ranking: external groups come from the peers' newest rounds first (as in uniform);
  within a round they are drawn by weight = signal x sender record. Signal is the
  reward spread of the group (a group half right, half wrong teaches most); a sender
  whose claimed rewards disagree with our re-scoring loses weight (it is broken or
  lying), one that agrees regains it. Each queued group moves its sender's record once.

Self-replay (``sapo.self_replay``, ``learn.replay``): once the update is composed,
the slots of the budget B that hold no group with signal (this round's own groups
without signal, external slots nobody filled) go to this node's own past groups
that had signal, replacing the no-signal ones, never an item already in the update.

Groups queued unverified (``sapo.verify: when_drawn``) are checked as they are taken;
one that fails leaves the queue and the draw goes on among the rest, at most
``MAX_DRAWS_PER_SLOT`` tries per external slot, so a node verifies about J groups a
round however many its peers send. Until then the adaptive ranking reads the
sender's claimed rewards for a group's signal, and its record moves when verified.

Invariants:
- The update never holds more than B groups, and never a group twice; with replay,
  never two groups of one item.
- Every external group in an update was verified by this node.
- A group taken from the queue leaves it: each external group is trained on once.
- Deterministic given (seed, round), the queue's content and its clock.
- Tenure (``ratelimit.Tenure``) is remembered for a bounded number of peers, the
  least recently heard forgotten first; so is each sender's record (``peer_trust``,
  a ``PeerLRU`` of ``TRUSTED_PEERS``: the least recently moved forgotten first, and
  counted), so a flood of identities cannot grow it: a forgotten sender starts again
  at full weight, as a new identity would.
"""

from __future__ import annotations

import dataclasses
import math
import random
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from swarmnode.config import SapoConfig
from swarmnode.learn.groups import RolloutGroup, reward_std
from swarmnode.learn.replay import ReplayBuffer
from swarmnode.share.ingest import Entry, IngestQueue
from swarmnode.share.ratelimit import Tenure

MIN_TENURE_WEIGHT = 1e-3  # a brand-new peer still fills slots nobody else can
MAX_DRAWS_PER_SLOT = 4  # verify: when_drawn: tries per external slot, then a shortfall
COHORT_SHARE = 0.1  # newcomers whose tenure began within this x peer_tenure_s share a weight
TRUSTED_PEERS = 16_384  # senders whose record peer_trust keeps (as ratelimit.Tenure's)
V = TypeVar("V")


class PeerLRU(Mapping[str, V]):
    """Per-peer values for at most ``max_peers`` peers. Setting one makes it the most
    recent; past the bound the least recently set is forgotten, and counted
    (``forgotten``). A peer not held reads as ``default``, as a forgotten one does.

    Thread-safe for one writer: readers on other threads iterate a ``snapshot``.

    >>> t = PeerLRU(2, default=0)
    >>> t["a"] = 1; t["b"] = 2; t["a"] += 2; t["c"] = 4
    >>> dict(t), t["b"], "b" in t, t.forgotten
    ({'a': 3, 'c': 4}, 0, False, 1)
    """

    def __init__(self, max_peers: int, default: V) -> None:
        self.max_peers, self.default = max_peers, default
        self.forgotten = 0
        self._values: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()

    def __getitem__(self, peer: str) -> V:
        return self._values.get(peer, self.default)

    def __setitem__(self, peer: str, value: V) -> None:
        with self._lock:
            self._values[peer] = value
            self._values.move_to_end(peer)
            while len(self._values) > self.max_peers:
                self._values.popitem(last=False)
                self.forgotten += 1

    def __contains__(self, peer: object) -> bool:
        return peer in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self.snapshot())

    def __len__(self) -> int:
        return len(self._values)

    def snapshot(self) -> dict[str, V]:
        """A copy, oldest first."""
        with self._lock:
            return dict(self._values)


@dataclass
class Composition:
    """This round's training batch and how it was made."""

    groups: list[RolloutGroup]
    local: int
    external: int
    external_peers: int
    shortfall: int  # external slots that had to be filled with local groups (or left empty)
    replayed: int = 0  # own past groups in the batch (sapo.self_replay)

    def by_peer(self) -> dict[str, int]:
        """External groups in the batch, per sending peer."""
        return dict(Counter(g.origin for g in self.groups if g.is_peer))


def round_lag(entries: Sequence[tuple[str, Entry]]) -> dict[str, int]:
    """Per queue key: rounds behind the newest round its sender has in the queue.

    >>> g = lambda r: Entry(RolloutGroup(None, "", [], [], round=r), "p", 0, 0.0, True)
    >>> round_lag([("a", g(3)), ("b", g(5)), ("c", g(5))])
    {'a': 2, 'b': 0, 'c': 0}
    """
    newest: dict[str, int] = {}
    for _, e in entries:
        newest[e.peer] = max(newest.get(e.peer, e.group.round), e.group.round)
    return {k: newest[e.peer] - e.group.round for k, e in entries}


def signal(group: RolloutGroup) -> float:
    """Reward spread of a group, 0 for no signal, 0.5 for a half-right binary group.

    >>> signal(RolloutGroup(None, "", ["a", "b"], [1.0, 0.0]))  # type: ignore[arg-type]
    0.5
    """
    return reward_std(group.rewards)


class SwarmSampler:
    """Composes each round's update; the node calls it on the trainer thread."""

    def __init__(
        self,
        cfg: SapoConfig,
        queue: IngestQueue | None,
        seed: int = 0,
        replay: ReplayBuffer | None = None,
    ) -> None:
        self.cfg = cfg
        self.queue = queue
        self.seed = seed
        self.replay = replay
        # adaptive: EMA of honest reward claims per sender, bounded
        self.peer_trust: PeerLRU[float] = PeerLRU(TRUSTED_PEERS, default=1.0)
        self._judged: dict[str, None] = {}  # queue keys already counted in peer_trust
        # peer -> arrival of its first queued group, on the queue's clock
        self.tenure = queue.tenure if queue is not None else Tenure(0.0, clock=lambda: 0.0)

    def compose(self, round_index: int, local: Sequence[RolloutGroup]) -> Composition:
        rng = random.Random(f"sampler:{self.seed}:{round_index}")
        i = len(local) if self.cfg.local_groups is None else self.cfg.local_groups
        j = self.cfg.external_groups
        entries = self.queue.snapshot() if (self.queue is not None and j > 0) else []
        if self.cfg.mode == "adaptive":
            comp = self._adaptive(rng, list(local), i, j, entries)
        else:
            comp = self._uniform(rng, list(local), i, j, entries)
        return self._replayed(comp, i + j, round_index)

    def _replayed(self, comp: Composition, budget: int, round_index: int) -> Composition:
        """``comp`` with its slots that hold no signal filled from the replay buffer."""
        useful = [g for g in comp.groups if g.has_signal]
        if self.replay is None or len(useful) >= budget:
            return comp
        rng = random.Random(f"replay:{self.seed}:{round_index}")
        extra = self.replay.draw(rng, budget - len(useful), {g.ref.key for g in comp.groups})
        if not extra:
            return comp
        return dataclasses.replace(
            comp,
            groups=useful + extra,
            local=sum(g.is_local for g in useful),
            replayed=len(extra),
        )

    def _take(
        self,
        rng: random.Random,
        entries: list[tuple[str, Entry]],
        n: int,
        merit: Callable[[Entry], float],
    ) -> list[Entry]:
        """Draw and take ``n`` groups; a drawn group that fails its check (queued
        unverified) is replaced by another draw, within ``MAX_DRAWS_PER_SLOT`` x n."""
        if self.queue is None or n <= 0:
            return []
        taken: list[Entry] = []
        pool, tries = list(entries), 0
        weight = self.peer_weights({e.peer for _, e in entries})
        while len(taken) < n and pool and tries < MAX_DRAWS_PER_SLOT * n:
            picked = self._draw(
                rng, pool, min(n - len(taken), MAX_DRAWS_PER_SLOT * n - tries), merit, weight
            )
            tries += len(picked)
            got = self.queue.take([k for k, _ in picked])
            for e in got:
                self._judge(e)
            taken += got
            tried = {k for k, _ in picked}
            pool = [(k, e) for k, e in pool if k not in tried]
        return taken

    def _finish(self, local: list[RolloutGroup], taken: list[Entry], shortfall: int) -> Composition:
        external = [e.group for e in taken]
        return Composition(
            groups=local + external,
            local=len(local),
            external=len(external),
            external_peers=len({e.peer for e in taken}),
            shortfall=shortfall,
        )

    def _uniform(
        self,
        rng: random.Random,
        local: list[RolloutGroup],
        i: int,
        j: int,
        entries: list[tuple[str, Entry]],
    ) -> Composition:
        taken = self._take(rng, entries, j, lambda e: 1.0)
        shortfall = j - len(taken)
        chosen = local[: i + shortfall]  # fill-up with the round's other local groups
        return self._finish(chosen, taken, shortfall)

    def _adaptive(
        self,
        rng: random.Random,
        local: list[RolloutGroup],
        i: int,
        j: int,
        entries: list[tuple[str, Entry]],
    ) -> Composition:
        budget = i + j
        for key, e in entries:
            if e.verified:  # an unverified group's record moves when it is verified
                self._update_trust(key, e)
        useful_local = [g for g in local if g.has_signal]
        min_local = min(len(useful_local), math.ceil(budget / 4)) if j > 0 else budget
        # Local slots whose groups carry no signal go to external groups.
        want = j + i - min(len(useful_local), i)
        n_ext = min(len(entries), budget - min_local, want)
        taken = self._take(
            rng,
            entries,
            n_ext,
            lambda e: signal(e.group) * max(0.05, self.peer_trust[e.peer]),
        )
        n_local = min(len(useful_local), budget - len(taken))
        shortfall = max(0, j - len(taken))
        return self._finish(useful_local[:n_local], taken, shortfall)

    def _judge(self, entry: Entry) -> None:
        """A group verified as it was taken (once: it has left the queue): its sender's
        record moves now."""
        if self.cfg.mode == "adaptive" and entry.verified_when_drawn:
            self._move_trust(entry)

    def _update_trust(self, key: str, entry: Entry) -> None:
        if key in self._judged:
            return
        self._judged[key] = None
        if len(self._judged) > 65_536:  # bounded: forget the oldest half
            for k in list(self._judged)[:32_768]:
                del self._judged[k]
        self._move_trust(entry)

    def _move_trust(self, entry: Entry) -> None:
        old = self.peer_trust[entry.peer]
        self.peer_trust[entry.peer] = 0.9 * old + 0.1 * (1.0 if entry.claimed_match else 0.0)

    def tenure_weight(self, peer: str) -> float:
        """1 for a peer heard from for ``peer_tenure_s`` or longer; a newer one weighs
        the square of the share of it it has served. (With the share itself, five
        identities a minute old together weighed half a peer known for ten minutes
        and took a third of its slots: a peer three minutes old kept 63-71% of its
        rounds against them in ``bench_flood``; squared, a minute-old identity
        weighs 1% of an established peer.)"""
        span = self.cfg.peer_tenure_s
        if span <= 0:
            return 1.0
        return min(1.0, max(MIN_TENURE_WEIGHT, (self.tenure.age(peer) / span) ** 2))

    def peer_weights(self, peers: Iterable[str]) -> dict[str, float]:
        """Each peer's weight in the draw: its ``tenure_weight``, shared within its
        cohort while it is new. A cohort is the newcomers (not yet at full weight) whose
        tenure began in the same ``COHORT_SHARE`` x ``peer_tenure_s`` window (a minute at
        the default): each weighs its own tenure weight divided by their number, so
        identities a flood makes at once weigh one peer of their age however many
        they are, while a peer that came earlier keeps its own weight; peers known for
        ``peer_tenure_s`` weigh 1 each. Among peers that all began together (a young
        swarm) the draw is unchanged. (Each weighed alone, five Sybils under every
        rate, up to 200 s old, took the slot of a peer known for ten minutes in 7 of 29
        rounds: docs/experiments/2026-12-06-flood-evict.)

        >>> s = SwarmSampler(SapoConfig(peer_tenure_s=600.0), None)
        >>> for p, t in [("old", -600.0), ("a", -300.0), ("b", -290.0), ("c", -200.0)]:
        ...     s.tenure.note(p, t)
        >>> {p: round(w, 3) for p, w in s.peer_weights(["old", "a", "b", "c"]).items()}
        {'old': 1.0, 'a': 0.125, 'b': 0.117, 'c': 0.111}
        """
        weights = {p: self.tenure_weight(p) for p in peers}
        span = self.cfg.peer_tenure_s * COHORT_SHARE
        cohort = {
            p: math.floor(self.tenure.started(p) / span) for p, w in weights.items() if w < 1.0
        }
        size = Counter(cohort.values())
        return {p: w / size[cohort[p]] if p in cohort else w for p, w in weights.items()}

    def _draw(
        self,
        rng: random.Random,
        entries: list[tuple[str, Entry]],
        n: int,
        merit: Callable[[Entry], float],
        weight: Mapping[str, float],
    ) -> list[tuple[str, Entry]]:
        """``n`` entries without replacement, the peers' newest rounds first; within a
        round tier weight = weight[peer] x merit(group) / (peer's groups in the tier)."""
        lag = round_lag(entries)
        picked: list[tuple[str, Entry]] = []
        for tier in sorted(set(lag.values())):
            pool = [(k, e) for k, e in entries if lag[k] == tier]
            count = Counter(e.peer for _, e in pool)
            weights = [weight[e.peer] * merit(e) / count[e.peer] + 1e-12 for _, e in pool]
            while pool and len(picked) < n:  # weighted sampling without replacement
                i = rng.choices(range(len(pool)), weights=weights)[0]
                picked.append(pool.pop(i))
                weights.pop(i)
        return picked
