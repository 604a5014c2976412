"""Rewards: pure functions from (completion text, reasoning-gym entry) to a float.

The prompt (see ``tasks.build_messages``) asks for the final answer as
``<answer>...</answer>``. ``extract_answer`` takes the *last* such span;
``accuracy_reward`` scores it with reasoning-gym's own ``score_answer`` for the
entry's dataset; ``format_reward`` only checks the shape. ``score_completions`` is
the training reward of a group, the one scorer for local and peers' completions:
accuracy plus ``train.format_reward_weight`` times format (weight 0 by default, as
SAPO trains on the task reward alone; the format reward is always logged).

Invariants:
- Every function accepts any input without raising: a completion that is not a
  string, an entry without metadata or an unknown dataset all score 0.0.
- Accuracy and format rewards lie in [0, 1] (NaN or out-of-range verifier output is
  clamped); a training reward lies in [0, 1 + format_weight].
- No state: the same arguments always give the same reward.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import lru_cache
from typing import Any

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"

ScoreFn = Callable[[str | None, dict[str, Any]], float]
# (completions of one item, its regenerated entry) -> (training rewards, format rewards)
Scorer = Callable[[Sequence[str], Mapping[str, Any]], tuple[list[float], list[float]]]


def extract_answer(completion: object) -> str | None:
    """The stripped text of the last ``<answer>...</answer>`` span, else None.

    Tags are case-sensitive. Without any complete span, the first non-empty line
    after a trailing unclosed ``<answer>`` (generation cut off) counts.

    >>> extract_answer("2 + 3 is five. <answer> 5 </answer>")
    '5'
    >>> extract_answer("<answer>1</answer> no wait <answer>2</answer>")
    '2'
    >>> extract_answer("The answer is <answer>42")
    '42'
    >>> extract_answer("<answer> 42\\nbecause 40 + 2 = 42")
    '42'
    >>> extract_answer("The answer is 42.") is None
    True
    >>> extract_answer("<answer>  </answer>") is None
    True
    >>> extract_answer("<answer>1</answer></answer> <answer>2")
    '1'
    >>> extract_answer(None) is None
    True
    """
    if not isinstance(completion, str):
        return None
    # str.find/rfind only: linear time on any input (a regex here backtracks
    # quadratically on adversarial text such as "<answer>" repeated).
    close = completion.rfind(ANSWER_CLOSE)
    opened = completion.rfind(ANSWER_OPEN, 0, max(close, 0)) if close >= 0 else -1
    if opened >= 0:
        start = opened + len(ANSWER_OPEN)
        answer = completion[start : completion.find(ANSWER_CLOSE, start)]
    else:
        # No complete span: the first line after a trailing open tag (generation
        # cut off, or the closing tag forgotten) still counts; later lines are chatter.
        last = completion.rfind(ANSWER_OPEN)
        tail = completion[last + len(ANSWER_OPEN) :].lstrip() if last >= 0 else ""
        answer = tail.split("\n", 1)[0]
    return answer.strip() or None


@lru_cache(maxsize=256)
def _score_fn(dataset: str) -> ScoreFn | None:
    """reasoning-gym's ``score_answer`` for a dataset name, or None if unknown."""
    import reasoning_gym  # heavy-ish import, deferred

    try:
        fn: ScoreFn = reasoning_gym.get_score_answer_fn(dataset)
    except Exception:  # unknown name, or a dataset whose default config fails
        return None
    return fn


def _clamp(value: object) -> float:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return 0.0
    if math.isnan(x):
        return 0.0
    return min(1.0, max(0.0, x))


def accuracy_reward(completion: object, entry: Mapping[str, Any]) -> float:
    """reasoning-gym's score of the extracted answer; 0.0 when there is none.

    The dataset comes from ``entry["metadata"]["source_dataset"]``, as every
    reasoning-gym entry carries it. A verifier that raises on a strange answer
    scores it 0.0: model text is untrusted input to the verifier.

    >>> import reasoning_gym
    >>> entry = reasoning_gym.create_dataset("chain_sum", seed=1, size=10)[0]
    >>> accuracy_reward(f"<answer>{entry['answer']}</answer>", entry)
    1.0
    >>> accuracy_reward("<answer>not a number</answer>", entry)
    0.0
    >>> accuracy_reward(entry["answer"], entry)  # right, but no answer tag
    0.0
    >>> accuracy_reward("<answer>1</answer>", {"answer": "1"})  # no metadata
    0.0
    """
    answer = extract_answer(completion)
    if answer is None or not isinstance(entry, Mapping):
        return 0.0
    metadata = entry.get("metadata")
    dataset = metadata.get("source_dataset") if isinstance(metadata, Mapping) else None
    if not isinstance(dataset, str):
        return 0.0
    score = _score_fn(dataset)
    if score is None:
        return 0.0
    try:
        return _clamp(score(answer, dict(entry)))
    except Exception:  # the verifier choked on model text: that answer is wrong
        return 0.0


def format_reward(completion: object) -> float:
    """1.0 for exactly one non-empty answer span and nothing after it, 0.5 if an
    answer can be extracted at all, else 0.0.

    >>> format_reward("Adding gives 7. <answer>7</answer>")
    1.0
    >>> format_reward("<answer>7</answer>")
    1.0
    >>> format_reward("<answer>7</answer> and then <answer>8</answer>")
    0.5
    >>> format_reward("<answer>7")
    0.5
    >>> format_reward("7")
    0.0
    >>> format_reward(b"<answer>7</answer>")
    0.0
    """
    if not isinstance(completion, str) or extract_answer(completion) is None:
        return 0.0
    single = completion.count(ANSWER_OPEN) == 1 and completion.count(ANSWER_CLOSE) == 1
    if single and completion.rstrip().endswith(ANSWER_CLOSE):
        return 1.0
    return 0.5


def strict(score: float) -> float:
    """1.0 for a fully right answer, else 0.0: partial credit is not accuracy.

    >>> strict(1.0), strict(0.5), strict(0.01)
    (1.0, 0.0, 0.0)
    """
    return 1.0 if score >= 1.0 else 0.0


def score_completions(
    completions: Sequence[str],
    entry: Mapping[str, Any],
    format_weight: float,
    partial_credit: bool = True,
) -> tuple[list[float], list[float]]:
    """(training rewards, format rewards) of one item's completions.

    >>> score_completions(["<answer>7</answer>", "7"], {}, 0.5)
    ([0.5, 0.0], [1.0, 0.0])
    """
    fmt = [format_reward(c) for c in completions]
    acc = [accuracy_reward(c, entry) for c in completions]
    if not partial_credit:
        acc = [strict(a) for a in acc]
    return [a + format_weight * f for a, f in zip(acc, fmt, strict=True)], fmt


def make_scorer(format_weight: float, partial_credit: Collection[str] = ()) -> Scorer:
    """A node's training reward, for its own groups and (re-scoring) its peers'.

    Datasets named in ``partial_credit`` keep reasoning-gym's partial credit; every
    other dataset is scored strictly (see ``strict``).

    >>> import reasoning_gym
    >>> entry = reasoning_gym.create_dataset("basic_arithmetic", seed=1, size=5)[1]
    >>> wrong = [f"<answer>1{entry['answer']}</answer>"]  # '13' for 3: contains it
    >>> make_scorer(0.0)(wrong, entry)[0], make_scorer(0.0, ["basic_arithmetic"])(wrong, entry)[0]
    ([0.0], [0.5])
    """
    allowed = frozenset(partial_credit)

    def score(
        completions: Sequence[str], entry: Mapping[str, Any]
    ) -> tuple[list[float], list[float]]:
        meta = entry.get("metadata") if isinstance(entry, Mapping) else None
        dataset = meta.get("source_dataset") if isinstance(meta, Mapping) else None
        return score_completions(completions, entry, format_weight, dataset in allowed)

    return score
