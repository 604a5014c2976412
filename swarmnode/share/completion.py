"""Same-question group completion: peers' verified answers turn a no-signal group into one.

A group whose G completions all scored the same teaches nothing (its advantages are
all zero). When peers answered the *same item* (the swarm's shared schedule makes
that common, see ``tasks.SharedSchedule``) and some of their answers scored higher
than all of ours, those answers join our group: an all-wrong group plus a peer's
right answer is a group with signal, whose advantages push our own wrong answers
down and the peer's right one up. This goes beyond the SAPO paper, which only mixes
whole groups.

``AnswerBook`` keeps, per item, what peers answered, as verified by ingestion (the
item regenerated locally, every completion re-scored by this node's own verifier:
the sender's rewards are never used). ``complete_group`` merges.

Invariants:
- Bounded: at most ``max_items`` items (least recently added leave first), at most
  ``max_per_item`` answers per item, and per item at most ``max_per_peer`` answers
  from one peer, so no peer can fill a group alone.
- Only answers to the very same item (equal ``ItemRef.key``) are merged, only ones
  that scored strictly higher than every completion of the local group, at most
  ``max_per_peer`` per peer and ``max_total`` in all; a peer's answer is merged into
  at most one group (it leaves the book when used).
- A merged group keeps the local group's identity (origin local, round, ref); the
  merged completions come with this node's token ids, re-tokenised from their text.
- Held-out questions (``tasks.is_heldout``) never enter the book, so nothing is
  ever completed into one.
- Thread-safe: ingestion adds from a worker thread, the trainer thread merges.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from swarmnode.learn.groups import RolloutGroup
from swarmnode.learn.rewards import format_reward
from swarmnode.learn.tasks import is_heldout


@dataclass(frozen=True)
class Answer:
    """One verified peer completion for an item."""

    peer: str
    text: str
    reward: float  # this node's own score of the text
    finished: bool  # ended by itself (EOS), not at the sender's token cap


class AnswerBook:
    """Peers' verified completions, by item (see module docstring for the bounds)."""

    def __init__(
        self,
        max_items: int = 256,
        max_per_item: int = 32,
        max_per_peer: int = 2,
        heldout_percent: int = 0,
    ) -> None:
        self.max_items = max_items
        self.heldout_percent = heldout_percent  # answers to held-out questions: never kept
        self.max_per_item = max_per_item
        self.max_per_peer = max_per_peer
        self._items: OrderedDict[str, list[Answer]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, group: RolloutGroup) -> int:
        """Record a verified peer group's completions; return how many were kept.

        Only completions with a positive reward are worth keeping (a wrong answer can
        never complete an all-wrong group), best first, within the per-peer bound.
        """
        if is_heldout(group.question, self.heldout_percent):
            return 0  # nothing ever completes into a held-out question
        finished = group.finished or [True] * len(group.completions)
        ranked = sorted(
            zip(group.rewards, group.completions, finished, strict=True),
            key=lambda t: -t[0],
        )
        with self._lock:
            answers = self._items.pop(group.ref.key, [])
            have = sum(a.peer == group.origin for a in answers)
            seen = {a.text for a in answers}
            kept = 0
            for reward, text, fin in ranked:
                if reward <= 0 or have >= self.max_per_peer or len(answers) >= self.max_per_item:
                    break
                if text in seen:
                    continue
                answers.append(Answer(group.origin, text, float(reward), bool(fin)))
                seen.add(text)
                have += 1
                kept += 1
            if answers:
                self._items[group.ref.key] = answers  # newest at the end
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)
        return kept

    def take(self, key: str, above: float, max_per_peer: int, max_total: int) -> list[Answer]:
        """Remove and return up to ``max_total`` answers to item ``key`` scoring > ``above``."""
        with self._lock:
            answers = self._items.get(key, [])
            picked: list[Answer] = []
            per_peer: dict[str, int] = {}
            for a in sorted(answers, key=lambda a: -a.reward):
                if len(picked) >= max_total:
                    break
                if a.reward > above and per_peer.get(a.peer, 0) < max_per_peer:
                    picked.append(a)
                    per_peer[a.peer] = per_peer.get(a.peer, 0) + 1
            rest = [a for a in answers if a not in picked]
            if rest:
                self._items[key] = rest
            else:
                self._items.pop(key, None)
            return picked

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._items.values())


def complete_group(
    group: RolloutGroup,
    book: AnswerBook,
    encode: Callable[[str, bool], list[int]],
    max_per_peer: int = 2,
    max_total: int = 4,
) -> tuple[RolloutGroup, int]:
    """``group`` with peers' better answers to the same item merged in, if it lacks signal.

    Returns (group, number of merged completions); the group is returned unchanged
    (and 0) when it has signal already or no peer answered better.

    >>> from swarmnode.learn.groups import ItemRef
    >>> ref = ItemRef("chain_sum", {"size": 10}, 1, 0)
    >>> mine = RolloutGroup(ref, "1+1?", ["3", "4"], [0.0, 0.0], completion_ids=[[3], [4]])
    >>> book = AnswerBook()
    >>> theirs = RolloutGroup(ref, "1+1?", ["2", "5"], [1.0, 0.0], origin="peer")
    >>> book.add(theirs)
    1
    >>> merged, n = complete_group(mine, book, lambda text, fin: [int(text)])
    >>> n, merged.completions, merged.rewards, merged.completion_ids, merged.has_signal
    (1, ['3', '4', '2'], [0.0, 0.0, 1.0], [[3], [4], [2]], True)
    """
    if group.has_signal or not group.rewards:
        return group, 0
    answers = book.take(group.ref.key, max(group.rewards), max_per_peer, max_total)
    if not answers:
        return group, 0
    ids = group.completion_ids or [encode(t, True) for t in group.completions]
    finished = group.finished or [True] * len(group.completions)
    merged = replace(
        group,
        completions=[*group.completions, *(a.text for a in answers)],
        rewards=[*group.rewards, *(a.reward for a in answers)],
        completion_ids=[*ids, *(encode(a.text, a.finished) for a in answers)],
        finished=[*finished, *(a.finished for a in answers)],
        format_rewards=None
        if group.format_rewards is None
        else [*group.format_rewards, *(format_reward(a.text) for a in answers)],
    )
    return merged, len(answers)


def complete_groups(
    groups: Sequence[RolloutGroup],
    book: AnswerBook,
    encode: Callable[[str, bool], list[int]],
    max_per_peer: int,
    max_total: int,
) -> tuple[list[RolloutGroup], int]:
    """``complete_group`` over a round's groups; returns (groups, groups completed)."""
    out, done = [], 0
    for g in groups:
        merged, n = complete_group(g, book, encode, max_per_peer, max_total)
        out.append(merged)
        done += n > 0
    return out, done


class GroupCompleter:
    """The node-side step before sampling: complete this round's no-signal groups.

    A group that finds no better peer answer yet is kept back one round (at most
    ``max_pending`` groups; peers that run at the same pace publish their answers
    about when we finish ours) and tried once more: its completions are then one
    update old, which is still closer to this policy than any peer's.
    """

    def __init__(
        self,
        book: AnswerBook,
        encode: Callable[[str, bool], list[int]],
        max_per_peer: int,
        max_total: int,
        max_pending: int,
    ) -> None:
        self.book = book
        self.encode = encode
        self.max_per_peer = max_per_peer
        self.max_total = max_total
        self.max_pending = max_pending
        self._pending: list[RolloutGroup] = []

    def prepare(self, groups: Sequence[RolloutGroup]) -> tuple[list[RolloutGroup], int]:
        """The local groups to sample from (signal first) and how many were completed."""
        retried, n_retried = complete_groups(
            self._pending, self.book, self.encode, self.max_per_peer, self.max_total
        )
        current, n_now = complete_groups(
            groups, self.book, self.encode, self.max_per_peer, self.max_total
        )
        self._pending = [g for g in current if not g.has_signal][: self.max_pending]
        ready = [g for g in retried if g.has_signal] + current
        ready.sort(key=lambda g: not g.has_signal)  # stable: groups with signal first
        return ready, n_retried + n_now
