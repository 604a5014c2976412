"""The ingestion queue: what peers share, verified, re-scored, bounded and fair.

A peer's group is kept only if this node can check it: the item is regenerated from
its reference with the local reasoning-gym, the question must match, and every
completion is re-scored against the locally regenerated answer. The sender's
rewards are never used (a mismatch is only counted).

Invariants:
- Bounded in groups (``queue_groups``) and bytes of text (``queue_bytes``). When full,
  the peer holding the most groups for its tenure (groups / ``tenure_weight``) gives
  up its oldest: a peer that sends a batch a round keeps it however many groups
  others pour in. (With the oldest group of the queue leaving first, five Sybils under
  every rate turned a 512-group queue over in seconds, and the honest peer's batch,
  older than theirs when the sampler drew, was trained in 20 of 63 rounds:
  docs/experiments/2026-12-05-flood-embedded.) No peer holds more than
  ``max_peer_share`` of the group bound: its own oldest group makes room for its newest.
- ``tenure`` is when each peer's first group was queued (bounded: ``ratelimit.Tenure``);
  the sampler weighs peers by it too.
- Deduplicated: a group (item + multiset of completions) is admitted once, whoever
  sends it and however often; the memory of seen groups is bounded too.
- Fresh: groups older than ``freshness_s`` are refused on arrival and expire in the
  queue; groups stamped in the future beyond ``max_clock_skew_s`` are refused.
- Only the accepted catalog (this node's datasets with their exact configs, plus
  ``sapo.extra_catalog``) is ever regenerated: no peer can make us build a huge or
  slow dataset. Configs are compared as values (a peer's 1 equals our 1.0), and a
  kept group carries our own config.
- Held-out items are refused ("heldout"): those at seed >= ``tasks.HELDOUT_SEED``
  (where ``swarmnode eval`` draws) and those whose question lies in the held-out
  partition (``tasks.is_heldout`` with ``heldout_percent``; checked on the claimed
  text, which verification then matches against the regenerated one): no node trains
  on what ``swarmnode eval`` scores, whatever its peers send. A held-out question is
  no verdict against its sender (a peer may hold out less).
- Groups with no signal after re-scoring (all rewards equal) are not kept: they
  would be filtered before training anyway (the paper's zero-advantage filter).
- Every refusal is counted by reason; nothing a peer sends raises out of ``offer``
  or ``take``.
- Each verdict on a peer (groups verified, failed verification, false reward claims)
  goes to ``verdicts`` (the transport's peer scores) where it is made, once.
- ``sapo.verify: when_drawn``: ``offer`` runs only the cheap checks (freshness, size,
  dedup, held-out, catalog, and the sender's own claims showing signal) and queues
  the group unverified; ``take`` regenerates and re-scores it, and what fails there
  is counted, reported and not returned. A sender's claims can only get its group
  skipped, never trained: nothing leaves ``take`` unverified.
- Thread-safe: the network side offers, the trainer takes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmnode.config import DatasetSpec, SapoConfig
from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.learn.rewards import Scorer
from swarmnode.learn.tasks import HELDOUT_SEED, TaskError, is_heldout, level_configs, regenerate
from swarmnode.share.completion import AnswerBook
from swarmnode.share.ratelimit import Tenure

REASONS = (
    "heldout",
    "out_of_catalog",
    "unregenerable",
    "question_mismatch",
    "duplicate",
    "stale",
    "future",
    "no_signal",
    "too_large",
    "verifier_error",
)
# Verdicts: "accepted" (verified, queued), "failed_verification" (heldout,
# out_of_catalog, unregenerable, question_mismatch, verifier_error: false or unusable on
# purpose) and "false_claim"; stale, duplicate, no_signal can happen to honest peers.
Verdicts = Callable[[str, str, int], None]  # (peer, "accepted" | ..., count)
MAX_TENURE_WEIGHT = 60.0  # for eviction, a peer queued an hour ago weighs 60 newcomers


def tenure_weight(age_s: float) -> float:
    """A peer's weight when the full queue picks whose group leaves: 1 + the minutes
    since its first group was queued, at most ``MAX_TENURE_WEIGHT``.

    >>> tenure_weight(0.0), tenure_weight(600.0), tenure_weight(86_400.0)
    (1.0, 11.0, 60.0)
    """
    return min(MAX_TENURE_WEIGHT, 1.0 + age_s / 60.0)


@dataclass
class Entry:
    group: RolloutGroup
    peer: str
    size: int  # bytes of text, for the byte bound
    arrived: float
    claimed_match: bool  # did the sender's rewards equal ours? (reputation signal)
    verified: bool = True  # False: queued on the cheap checks only (verify: when_drawn)
    verified_when_drawn: bool = False  # verified by ``take`` (after the cheap checks)


@dataclass
class IngestStats:
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    evicted: Counter[str] = field(default_factory=Counter)  # full, peer_share, expired
    taken: int = 0
    claims_false: int = 0  # groups whose claimed rewards differed from ours
    unverified: int = 0  # of accepted: queued on the cheap checks (verify: when_drawn)
    late_verified: int = 0  # of those: verified when drawn
    late_verify_s: float = 0.0  # time spent verifying drawn groups (the trainer's thread)


def group_key(group: RolloutGroup) -> str:
    """Same item and same completions (any order) = same key, whoever sent it."""
    h = hashlib.blake2b(group.ref.key.encode(), digest_size=16)
    for text in sorted(group.completions):
        h.update(b"\x00" + text.encode("utf-8", "replace"))
    return h.hexdigest()


def _size(group: RolloutGroup) -> int:
    return len(group.question) + sum(len(c) for c in group.completions) + 64


def _same_rewards(claimed: Sequence[object], ours: Sequence[float]) -> bool:
    """Did the sender claim the rewards we computed? Junk claims simply do not match."""
    if len(claimed) != len(ours):
        return False
    return all(
        isinstance(c, int | float) and abs(float(c) - o) < 1e-6
        for c, o in zip(claimed, ours, strict=True)
    )


def _value_key(value: object) -> object:
    """A hashable form of a config value, equal for equal values whatever their encoding.

    A whole float is its int (msgpack encoders of JavaScript peers write 1.0 as 1);
    bools stay apart from numbers (True is not 1 to reasoning-gym's code).

    >>> _value_key({"a": 1.0, "b": [True, 2]}) == _value_key({"b": [True, 2.0], "a": 1})
    True
    >>> _value_key({"a": True}) == _value_key({"a": 1})
    False
    """
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return ("dict", frozenset((k, _value_key(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("list", tuple(_value_key(v) for v in value))
    return value


class Catalog:
    """The (dataset, exact config) pairs a node agrees to regenerate, compared by value."""

    def __init__(self, specs: Sequence[DatasetSpec]) -> None:
        self._configs: dict[tuple[str, object], dict[str, Any]] = {}
        for spec in specs:  # every curriculum level: peers may be at another one
            for config in level_configs(spec):
                self._configs[(spec.name, _value_key(config))] = config

    def canonical(self, ref: ItemRef) -> ItemRef | None:
        """``ref`` with this node's own config values, or None when out of catalog."""
        try:
            config = self._configs.get((ref.dataset, _value_key(ref.config)))
        except TypeError:  # an unhashable value: nothing we would ever build
            return None
        return None if config is None else dataclasses.replace(ref, config=config)


class IngestQueue:
    """Peers' external groups waiting for the sampler (verified, unless ``when_drawn``)."""

    def __init__(
        self,
        cfg: SapoConfig,
        catalog: Catalog,
        score: Scorer,
        clock: Callable[[], float] = time.time,
        answers: AnswerBook | None = None,
        verdicts: Verdicts | None = None,
        heldout_percent: int = 0,
    ) -> None:
        self.cfg = cfg
        self.heldout_percent = heldout_percent
        self.catalog = catalog
        self.score = score
        self.clock = clock
        self.answers = answers  # verified peers' answers by item, for group completion
        self.verdicts = verdicts  # where verdicts on peers go (peer scores), if anywhere
        self.lazy = cfg.verify == "when_drawn"
        self.stats = IngestStats()
        self._lock = threading.Lock()
        self._queue: OrderedDict[str, Entry] = OrderedDict()  # oldest first
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._seen_cap = max(4096, 8 * cfg.queue_groups)
        self._bytes = 0
        self._by_peer: dict[str, OrderedDict[str, None]] = {}  # peer -> its keys, oldest first
        self.tenure = Tenure(0.0, clock=clock)

    # -- intake ----------------------------------------------------------------

    def offer(self, peer: str, groups: Sequence[RolloutGroup]) -> int:
        """Check and admit a peer's groups; return how many were kept."""
        verdicts: Counter[str] = Counter()
        kept = 0
        for group in groups:
            reason = self._admit(peer, group, verdicts)
            if reason is None:
                kept += 1
            else:
                with self._lock:
                    self.stats.rejected[reason] += 1
        self._report(peer, verdicts)
        return kept

    def _admit(self, peer: str, group: RolloutGroup, verdicts: Counter[str]) -> str | None:
        now = self.clock()
        if group.created < now - self.cfg.freshness_s:
            return "stale"
        if group.created > now + self.cfg.max_clock_skew_s:
            return "future"
        size = _size(group)
        if size > self.cfg.queue_bytes // 4:
            return "too_large"
        key = group_key(group)
        with self._lock:
            if key in self._seen:
                return "duplicate"
        if group.ref.seed >= HELDOUT_SEED:
            verdicts["failed_verification"] += 1
            return "heldout"
        if is_heldout(group.question, self.heldout_percent):
            return "heldout"
        ref = self.catalog.canonical(group.ref)
        if ref is None:
            verdicts["failed_verification"] += 1
            return "out_of_catalog"
        if self.lazy:
            if len(set(group.rewards)) <= 1:  # the sender says so itself: skip, unchecked
                return "no_signal"
            with self._lock:
                if key in self._seen:
                    return "duplicate"
                self._remember(key)
                entry = Entry(dataclasses.replace(group, ref=ref), peer, size, now, True, False)
                self._insert(key, entry)
                self.stats.accepted += 1
                self.stats.unverified += 1
            return None
        reason, verified, claimed_match = self._verify(peer, group, ref, verdicts)
        if reason is not None:
            return reason
        assert verified is not None
        with self._lock:
            if key in self._seen:  # raced with the same group from another peer
                return "duplicate"
            self._remember(key)
        if self.answers is not None:  # even a no-signal group's right answers can help
            self.answers.add(verified)
        with self._lock:
            if not verified.has_signal:
                return "no_signal"
            self._insert(key, Entry(verified, peer, size, now, claimed_match))
            self.stats.accepted += 1
        verdicts["accepted"] += 1
        return None

    def _verify(
        self, peer: str, group: RolloutGroup, ref: ItemRef, verdicts: Counter[str]
    ) -> tuple[str | None, RolloutGroup | None, bool]:
        """Regenerate the item, match the question, re-score: (refusal, group, claims true)."""
        try:
            entry = regenerate(ref)
        except TaskError:
            verdicts["failed_verification"] += 1
            return "unregenerable", None, False
        if entry["question"] != group.question:
            verdicts["failed_verification"] += 1
            return "question_mismatch", None, False
        try:
            rewards, fmt = self.score(group.completions, entry)
        except Exception:  # a verifier bug must not take the node down; counted
            verdicts["failed_verification"] += 1
            return "verifier_error", None, False
        claimed_match = _same_rewards(group.rewards, rewards)
        if not claimed_match:
            verdicts["false_claim"] += 1
            with self._lock:
                self.stats.claims_false += 1
        verified = RolloutGroup(
            ref=ref,
            question=group.question,
            completions=list(group.completions),
            rewards=rewards,
            origin=peer,
            round=group.round,
            model=group.model,
            created=group.created,
            format_rewards=fmt,
            finished=None if group.finished is None else list(group.finished),
            logprobs=None if group.logprobs is None else list(group.logprobs),
        )
        return None, verified, claimed_match

    def _verify_drawn(self, entry: Entry) -> Entry | None:
        """The full check for a group queued unverified; None (counted) if it fails."""
        verdicts: Counter[str] = Counter()
        t0 = time.perf_counter()
        reason, verified, claimed_match = self._verify(
            entry.peer, entry.group, entry.group.ref, verdicts
        )
        if reason is None and verified is not None and not verified.has_signal:
            reason = "no_signal"  # the sender's claims said otherwise
        with self._lock:
            self.stats.late_verify_s += time.perf_counter() - t0
            if reason is not None:
                self.stats.rejected[reason] += 1
            else:
                self.stats.late_verified += 1
        if reason is None:
            verdicts["accepted"] += 1
        self._report(entry.peer, verdicts)
        if reason is not None or verified is None:
            return None
        return dataclasses.replace(
            entry,
            group=verified,
            claimed_match=claimed_match,
            verified=True,
            verified_when_drawn=True,
        )

    def _report(self, peer: str, verdicts: Counter[str]) -> None:
        if self.verdicts is None:
            return
        for kind, n in verdicts.items():
            if n:
                self.verdicts(peer, kind, n)

    def _remember(self, key: str) -> None:
        self._seen[key] = None
        while len(self._seen) > self._seen_cap:
            self._seen.popitem(last=False)

    def _insert(self, key: str, entry: Entry) -> None:
        cap_peer = max(1, int(self.cfg.max_peer_share * self.cfg.queue_groups))
        self.tenure.note(entry.peer, entry.arrived)
        own = self._by_peer.get(entry.peer)
        if own is not None and len(own) >= cap_peer:
            self._remove(next(iter(own)), "peer_share")
        while self._queue and (
            len(self._queue) >= self.cfg.queue_groups
            or self._bytes + entry.size > self.cfg.queue_bytes
        ):
            self._remove(self._evictee(), "full")
        self._queue[key] = entry
        self._bytes += entry.size
        self._by_peer.setdefault(entry.peer, OrderedDict())[key] = None

    def _evictee(self) -> str:
        """The oldest key of the peer holding the most groups for its tenure (of those
        alike, the one whose oldest group arrived first). O(peers queued), at most
        ``queue_groups``."""

        def load(peer: str) -> tuple[float, float]:
            keys = self._by_peer[peer]
            oldest = self._queue[next(iter(keys))].arrived
            return len(keys) / tenure_weight(self.tenure.age(peer)), -oldest

        return next(iter(self._by_peer[max(self._by_peer, key=load)]))

    def _remove(self, key: str, why: str | None) -> Entry:
        entry = self._queue.pop(key)
        self._bytes -= entry.size
        own = self._by_peer[entry.peer]
        del own[key]
        if not own:
            del self._by_peer[entry.peer]
        if why:
            self.stats.evicted[why] += 1
        return entry

    # -- output ----------------------------------------------------------------

    def expire(self) -> None:
        cutoff = self.clock() - self.cfg.freshness_s
        with self._lock:
            for key in [k for k, e in self._queue.items() if e.group.created < cutoff]:
                self._remove(key, "expired")

    def snapshot(self) -> list[tuple[str, Entry]]:
        """The current entries, oldest first (after expiring stale ones)."""
        self.expire()
        with self._lock:
            return list(self._queue.items())

    def take(self, keys: Sequence[str]) -> list[Entry]:
        """Remove and return these entries (those still present), each verified: one
        queued unverified is checked now and, if it fails, left out (counted)."""
        with self._lock:
            popped = [self._remove(k, None) for k in keys if k in self._queue]
        out = [e for e in popped if e.verified]
        out += [v for e in popped if not e.verified and (v := self._verify_drawn(e))]
        with self._lock:
            self.stats.taken += len(out)
        return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._queue)

    def per_peer(self) -> dict[str, int]:
        with self._lock:
            return {peer: len(keys) for peer, keys in self._by_peer.items()}

    def report(self) -> dict[str, Any]:
        with self._lock:
            return {
                "queue_groups": len(self._queue),
                "queue_bytes": self._bytes,
                "ingest_accepted": self.stats.accepted,
                "ingest_rejected": dict(self.stats.rejected),
                "ingest_evicted": dict(self.stats.evicted),
                "ingest_claims_false": self.stats.claims_false,
                "ingest_unverified": self.stats.unverified,
                "ingest_late_verified": self.stats.late_verified,
                "ingest_late_verify_s": round(self.stats.late_verify_s, 3),
            }
