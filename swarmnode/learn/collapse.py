"""Answer-collapse watch: flags a dataset whose answers turned into one constant.

A policy can learn a constant answer that is right often enough (count_bits once
collapsed to ``1``: right for every power of two). Accuracy alone hides it. For each
dataset, the watch keeps the last ``window`` extracted answers of the node's own
completions and the right answers of their items; a dataset is *collapsed* when one
answer makes up ``share`` or more of its window while the right answers vary.

Invariants: bounded (``window`` answers per dataset); a pure observer, it changes
nothing; ``collapsed()`` is what ``RoundRecord.collapsed`` carries each round.
"""

from __future__ import annotations

import hashlib
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any

from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.learn.rewards import extract_answer


def label(ref: ItemRef) -> str:
    """A dataset and config, short: the name and a digest of the config.

    >>> label(ItemRef("count_bits", {"size": 3}, 0, 1))
    'count_bits:7e30e6'
    """
    digest = hashlib.blake2b(ref.config_key.encode(), digest_size=3).hexdigest()
    return f"{ref.dataset}:{digest}"


class CollapseWatch:
    def __init__(
        self,
        regenerate: Callable[[ItemRef], dict[str, Any]],
        window: int = 64,
        share: float = 0.8,
    ) -> None:
        self.regenerate = regenerate
        self.window = window
        self.share = share
        self._answers: dict[str, deque[str | None]] = {}
        self._truths: dict[str, deque[str]] = {}

    def observe(self, groups: Sequence[RolloutGroup]) -> None:
        for g in groups:
            if not g.is_local:
                continue
            truth = str(self.regenerate(g.ref).get("answer"))
            name = label(g.ref)
            answers = self._answers.setdefault(name, deque(maxlen=self.window))
            truths = self._truths.setdefault(name, deque(maxlen=self.window))
            for text in g.completions:
                answers.append(extract_answer(text))
                truths.append(truth)

    def collapsed(self) -> list[str]:
        """Datasets whose recent answers are (nearly) one constant while truths vary.

        >>> from swarmnode.learn.groups import ItemRef
        >>> truths = {0: "1", 1: "2", 2: "3"}
        >>> watch = CollapseWatch(lambda ref: {"answer": truths[ref.index]}, window=8)
        >>> refs = [ItemRef("count_bits", {"size": 3}, 0, i) for i in range(3)]
        >>> watch.observe([RolloutGroup(r, "q", ["<answer>1</answer>"] * 4, [0.0] * 4)
        ...                for r in refs])
        >>> watch.collapsed() == [label(refs[0])]
        True
        """
        out = []
        for name, answers in self._answers.items():
            if len(answers) < self.window:
                continue
            top = Counter(a for a in answers if a is not None).most_common(1)
            varied = len(set(self._truths[name])) > 1
            if top and varied and top[0][1] >= self.share * len(answers):
                out.append(name)
        return sorted(out)
