"""eval's report: items paired with the base's by identity, a seeded bootstrap, saved
results read back only for their own round."""

from __future__ import annotations

from pathlib import Path

from swarmnode.ops.evalreport import (
    bootstrap_interval,
    compare,
    format_eval,
    load_eval,
    paired_difference,
    save_eval,
)


def _rec(index: int, score: float, dataset: str = "d", config: dict | None = None) -> dict:
    return {
        "dataset": dataset,
        "config": config or {"size": 9},
        "seed": 7,
        "index": index,
        "question": "q",
        "answer": "a",
        "completion": "c",
        "score": score,
    }


def test_pairs_by_item_not_by_position() -> None:
    trained = [_rec(0, 1.0), _rec(1, 1.0), _rec(2, 0.5), _rec(3, 1.0)]
    # The base lists the items in another order, misses item 3, and has an item with
    # the same index under another config (another item): it must not pair with 0.
    base = [_rec(2, 1.0), _rec(1, 0.0), _rec(0, 1.0), _rec(0, 0.0, config={"size": 5})]
    r = paired_difference(trained, base)
    assert r["items"] == 3 and r["unpaired"] == 2
    # item 0: 1-1, item 1: 1-0, item 2: strict(0.5)=0 - 1
    assert (r["better"], r["worse"], r["difference"]) == (1, 1, 0.0)
    assert r["trained"] == round(2 / 3, 3) and r["base"] == round(2 / 3, 3)


def test_bootstrap_is_seeded_and_covers_the_mean() -> None:
    diffs = [1.0] * 30 + [0.0] * 60 + [-1.0] * 10
    lo, hi = bootstrap_interval(diffs)
    assert (lo, hi) == bootstrap_interval(diffs)
    assert lo < 0.2 < hi and hi - lo < 0.4 and lo > 0.0


def test_compare_needs_records() -> None:
    assert compare({"accuracy": 1.0}, {"records": []}) is None
    assert compare({"records": [_rec(0, 1.0)]}, {"records": [_rec(0, 0.0)]})["difference"] == 1.0


def _result(acc: float, round_index: int = 4) -> dict:
    return {
        "round": round_index,
        "items": 2,
        "accuracy": acc,
        "interval": [0.0, 1.0],
        "seen_in_training": 0.0,
        "mean_score": acc,
        "per_dataset": {"d": {"items": 2, "accuracy": acc, "mean_score": acc, "collapsed": False}},
    }


def test_text_side_by_side() -> None:
    plain = format_eval(_result(0.5))
    assert plain[-1].split()[:3] == ["all", "(95%", "interval)"] and "0.500" in plain[-1]
    lines = format_eval(
        _result(0.5),
        _result(0.0),
        {"difference": 0.5, "interval": [0.0, 1.0], "better": 1, "worse": 0, "items": 2},
    )
    assert "against the untrained base" in lines[0]
    assert lines[2].split() == ["d", "0.500", "0.000"]
    assert "+0.500 (95% bootstrap +0.000 to +1.000); better on 1, worse on 0 of 2" in lines[-1]
    assert "not available" in format_eval(_result(0.5), _result(0.0), None)[-1]


def test_saved_result_is_for_its_round(tmp_path: Path) -> None:
    path = save_eval(tmp_path, _result(0.5), None, None)
    assert path.name == "round-000004.json"
    saved = load_eval(tmp_path, 4)
    assert saved is not None and saved["trained"]["accuracy"] == 0.5 and saved["base"] is None
    assert load_eval(tmp_path, 5) is None
    path.rename(path.with_name("round-000005.json"))  # a file under the wrong name
    assert load_eval(tmp_path, 5) is None
    path.with_name("round-000005.json").write_text("{not json")
    assert load_eval(tmp_path, 5) is None
