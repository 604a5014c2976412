"""How well does the base model do on candidate tasks? (picks a regime that can learn)

For each candidate (reasoning-gym dataset, difficulty config) the untrained policy
samples G completions for each of N items at the training temperature, exactly as a
round does, and answers the same items greedily. Printed per candidate:

- strict: share of sampled completions scoring 1.0 (partial credit does not count);
- mean: mean reasoning-gym score (partial credit included);
- partial_only_signal: share of groups whose rewards spread only through partial
  credit (trained on if partial credit were the reward, yet nobody was right);
- wrong_pushed_up: with partial credit as the reward, share of the completions given
  a positive advantage that are not right (what partial credit would teach);
- signal: share of groups whose rewards spread (would be trained on);
- greedy: strict accuracy of the greedy answer;
- distinct: distinct questions among ``--space`` items (is held-out really unseen?);
- top_answer: share of those items whose answer is the commonest one (a constant trap).

A regime is useful when strict lies around 0.05-0.30 (room to learn, signal to learn
from) distinct is close to ``--space`` (held-out items are new questions) and top_answer is
small (no single answer scores well without learning).

    python scripts/probe_tasks.py --items 24 --out docs/task-probe.csv
    python scripts/probe_tasks.py --only basic_arithmetic,gcd

The last line prints ``candidates= items= completions= tokens_generated=``.
"""

from __future__ import annotations

import argparse
import csv
import time
from collections import Counter
from pathlib import Path
from typing import Any

# (label, dataset, config): easy ends of the paper's specialties and a few more.
CANDIDATES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "add1",
        "basic_arithmetic",
        {
            "min_terms": 2,
            "max_terms": 2,
            "min_digits": 1,
            "max_digits": 1,
            "operators": ["+"],
            "allow_parentheses": False,
            "allow_negation": False,
        },
    ),
    (
        "addsub2",
        "basic_arithmetic",
        {
            "min_terms": 2,
            "max_terms": 2,
            "min_digits": 1,
            "max_digits": 2,
            "operators": ["+", "-"],
            "allow_parentheses": False,
            "allow_negation": False,
        },
    ),
    ("chain3", "chain_sum", {"min_terms": 3, "max_terms": 3, "min_digits": 1, "max_digits": 1}),
    (
        "dec1",
        "decimal_arithmetic",
        {
            "min_num_decimal_places": 1,
            "max_num_decimal_places": 1,
            "min_terms": 2,
            "max_terms": 2,
            "precision": 6,
        },
    ),
    (
        "decsum",
        "decimal_chain_sum",
        {
            "min_terms": 2,
            "max_terms": 2,
            "min_digits": 1,
            "max_digits": 1,
            "min_decimal_places": 1,
            "max_decimal_places": 1,
        },
    ),
    (
        "frac",
        "fraction_simplification",
        {"min_value": 1, "max_value": 10, "min_factor": 2, "max_factor": 5, "styles": ["plain"]},
    ),
    ("weekday", "calendar_arithmetic", {"tasks": ["weekday_offset", "weekday_of_date"]}),
    ("leap", "calendar_arithmetic", {"tasks": ["is_leap_year"]}),
    ("base", "base_conversion", {"min_base": 2, "max_base": 10, "min_value": 0, "max_value": 31}),
    (
        "prop",
        "propositional_logic",
        {
            "min_vars": 2,
            "max_vars": 2,
            "min_statements": 2,
            "max_statements": 2,
            "min_complexity": 1,
            "max_complexity": 1,
        },
    ),
    ("binmat", "binary_matrix", {"min_n": 2, "max_n": 2, "p_zero": 0.5}),
    ("arc", "arc_1d", {"min_size": 6, "max_size": 8, "num_train": 2}),
    ("prod2", "products", {"min_digits": 1, "max_digits": 2}),
    ("gcd", "gcd", {"min_value": 1, "max_value": 30}),
    ("lcm", "lcm", {"min_value": 1, "max_value": 12}),
    ("letters", "letter_counting", {"min_words": 2, "max_words": 4}),
    ("letters5", "letter_counting", {"min_words": 5, "max_words": 7}),
    ("letters8", "letter_counting", {"min_words": 8, "max_words": 12}),
    ("offset", "calendar_arithmetic", {"tasks": ["weekday_offset"]}),
    ("gcd50", "gcd", {"min_value": 1, "max_value": 50}),
    ("backward", "spell_backward", {"min_word_len": 3, "max_word_len": 5}),
    (
        "legs",
        "leg_counting",
        {"min_animals": 1, "max_animals": 2, "min_instances": 1, "max_instances": 3},
    ),
    ("bits", "count_bits", {"max_n": 255}),
    (
        "sort3",
        "number_sorting",
        {
            "min_numbers": 3,
            "max_numbers": 3,
            "min_decimals": 0,
            "max_decimals": 0,
            "min_value": 0.0,
            "max_value": 99.0,
        },
    ),
    (
        "eq",
        "simple_equations",
        {"min_terms": 2, "max_terms": 2, "min_value": 1, "max_value": 10, "operators": ["+", "-"]},
    ),
]


def question_space(name: str, config: dict[str, Any], space: int) -> tuple[int, float]:
    """Distinct questions among ``space`` items, and the share of the commonest answer.

    A large answer share is a constant-answer trap: a policy that always gives that
    answer scores it without learning the task.
    """
    from swarmnode.learn.groups import ItemRef
    from swarmnode.learn.tasks import ref_config, regenerate

    cfg = ref_config(config, 100_000)
    items = [regenerate(ItemRef(name, cfg, 1, i)) for i in range(space)]
    answers = Counter(str(it["answer"]) for it in items)
    return len({it["question"] for it in items}), answers.most_common(1)[0][1] / space


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--items", type=int, default=24, help="items per candidate")
    ap.add_argument("--completions", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--space", type=int, default=2000, help="items drawn for 'distinct'")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", help="comma-separated labels or dataset names")
    ap.add_argument("--model", default="embedded:smollm2-135m")
    ap.add_argument("--out", type=Path, help="CSV with one row per candidate")
    args = ap.parse_args()

    import torch

    from swarmnode.config import parse_config
    from swarmnode.learn.evaluate import probe_signal
    from swarmnode.learn.model import load_policy
    from swarmnode.learn.tasks import TaskError

    torch.set_num_threads(args.threads)
    wanted = set(args.only.split(",")) if args.only else None
    chosen = [c for c in CANDIDATES if wanted is None or wanted & {c[0], c[1]}]
    base = parse_config({"model": {"name": args.model}, "train": {"format_reward_weight": 0.0}})
    policy = load_policy(base.model, seed=0)
    rows: list[dict[str, Any]] = []
    tokens: float = 0  # an int: probe_signal counts tokens
    for label, name, config in chosen:
        t0 = time.perf_counter()
        cfg = parse_config(
            {
                "model": {"name": args.model},
                "tasks": {"seed": 1, "datasets": [{"name": name, "config": config}]},
                "rollout": {
                    "questions_per_round": args.items,
                    "completions_per_question": args.completions,
                    "max_new_tokens": args.max_new_tokens,
                },
            }
        )
        try:
            probe = probe_signal(cfg, policy, args.items)
        except TaskError as err:  # a candidate whose config reasoning-gym refuses
            print(f"label={label} dataset={name} error={err}", flush=True)
            continue
        tokens += probe.pop("tokens_generated")
        distinct, top_answer = question_space(name, config, args.space)
        row = {
            "label": label,
            "dataset": name,
            **{k: round(v, 3) for k, v in probe.items()},
            "distinct": distinct,
            "top_answer": round(top_answer, 3),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if args.out and rows:
        with args.out.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    print(
        f"candidates={len(rows)} items={args.items * len(rows)} "
        f"completions={args.items * args.completions * len(rows)} tokens_generated={tokens}"
    )


if __name__ == "__main__":
    main()
