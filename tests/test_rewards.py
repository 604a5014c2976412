"""Rewards on real reasoning-gym items: right, wrong and malformed completions."""

from __future__ import annotations

import doctest

import pytest
import reasoning_gym

from swarmnode.learn import rewards
from swarmnode.learn.rewards import accuracy_reward, extract_answer, format_reward


def _entry(name: str, index: int = 3, **config: object) -> dict:
    return reasoning_gym.create_dataset(name, seed=7, size=50, **config)[index]


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("chain_sum", {"min_terms": 2, "max_terms": 2, "max_digits": 1}),
        ("basic_arithmetic", {}),
        ("base_conversion", {}),
        ("fraction_simplification", {}),
        ("spell_backward", {}),
    ],
)
def test_right_answer_scores_one(name: str, config: dict) -> None:
    entry = _entry(name, **config)
    completion = f"Let me think.\n<answer>{entry['answer']}</answer>"
    assert accuracy_reward(completion, entry) == 1.0
    assert format_reward(completion) == 1.0


def test_wrong_answer_scores_zero() -> None:
    entry = _entry("chain_sum", min_terms=2, max_terms=2, max_digits=1)
    wrong = str(int(entry["answer"]) + 1)
    assert accuracy_reward(f"<answer>{wrong}</answer>", entry) == 0.0
    assert format_reward(f"<answer>{wrong}</answer>") == 1.0


def test_last_answer_span_counts() -> None:
    entry = _entry("chain_sum", min_terms=2, max_terms=2, max_digits=1)
    wrong = str(int(entry["answer"]) + 1)
    right = entry["answer"]
    assert accuracy_reward(f"<answer>{wrong}</answer> <answer>{right}</answer>", entry) == 1.0
    assert accuracy_reward(f"<answer>{right}</answer> <answer>{wrong}</answer>", entry) == 0.0


def test_partial_credit_from_reasoning_gym_is_kept() -> None:
    # reasoning-gym's default scorer gives len(oracle)/len(answer) when the oracle is inside.
    entry = _entry("spell_backward")
    score = accuracy_reward(f"<answer>{entry['answer']} x</answer>", entry)
    assert 0.0 < score < 1.0


def test_answer_in_metadata_only_dataset() -> None:
    # propositional_logic has answer None; the scorer checks the premises instead.
    entry = _entry("propositional_logic")
    assert entry["answer"] is None
    good = entry["metadata"]["example_answer"]
    assert accuracy_reward(f"<answer>{good}</answer>", entry) == 1.0
    assert accuracy_reward("<answer>((P ∨ Q</answer>", entry) < 0.1  # rg gives 0.05


@pytest.mark.parametrize(
    "completion",
    [
        "",
        "42",
        "<answer></answer>",
        "<answer>   </answer>",
        "</answer>42<answer>",
        "<ANSWER",
        "<answer>" * 10_000,
        None,
        42,
        b"<answer>1</answer>",
        ["<answer>1</answer>"],
    ],
)
def test_malformed_completions_never_raise(completion: object) -> None:
    entry = _entry("chain_sum", min_terms=2, max_terms=2, max_digits=1)
    assert accuracy_reward(completion, entry) == 0.0
    assert format_reward(completion) in (0.0, 0.5)
    extract_answer(completion)


@pytest.mark.parametrize(
    "entry",
    [
        {},
        {"answer": "1"},
        {"answer": "1", "metadata": None},
        {"answer": "1", "metadata": {"source_dataset": "no_such_dataset"}},
        {"answer": "1", "metadata": {"source_dataset": 5}},
        {"metadata": {"source_dataset": "chain_sum"}},  # no answer: scorer raises
        None,
        "not a mapping",
    ],
)
def test_malformed_entries_score_zero(entry: object) -> None:
    assert accuracy_reward("<answer>1</answer>", entry) == 0.0  # type: ignore[arg-type]


def test_odd_characters_are_just_a_wrong_answer() -> None:
    entry = _entry("chain_sum", min_terms=2, max_terms=2, max_digits=1)
    completion = "\x00\uffff<answer>\ud800</answer>"
    assert extract_answer(completion) == "\ud800"
    assert accuracy_reward(completion, entry) == 0.0
    assert format_reward(completion) == 1.0


def test_unclosed_tag_at_end_counts_for_accuracy_not_full_format() -> None:
    entry = _entry("chain_sum", min_terms=2, max_terms=2, max_digits=1)
    completion = f"Sum: <answer>{entry['answer']}"
    assert accuracy_reward(completion, entry) == 1.0
    assert format_reward(completion) == 0.5


def test_doctests() -> None:
    result = doctest.testmod(rewards)
    assert result.attempted >= 10
    assert result.failed == 0
