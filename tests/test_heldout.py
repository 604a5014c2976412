"""The held-out partition (tasks.heldout_percent): a question in it is never drawn,
never scheduled, refused at ingestion, never completed into; evaluation scores only it
and writes its items."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from swarmnode.config import SapoConfig, TasksConfig, parse_config
from swarmnode.learn.evaluate import evaluate, heldout_refs
from swarmnode.learn.tasks import HELDOUT_SEED, SharedSchedule, TaskMix, is_heldout, regenerate
from swarmnode.share.completion import AnswerBook
from swarmnode.share.ingest import Catalog, IngestQueue
from tests.helpers import SPEC, Clock, make_group, score, tiny_config

PERCENT = 30  # a large partition: every check below meets many held-out questions


def mix(percent: int = PERCENT) -> TaskMix:
    return TaskMix(TasksConfig(datasets=[SPEC], seed=7, heldout_percent=percent))


def heldout_index(inside: bool, seed: int = 7) -> int:
    """The first index at ``seed`` whose question is (or is not) held out."""
    m = mix()
    return next(i for i in range(SPEC.size) if m.is_heldout(make_group(i, seed=seed).ref) == inside)


def test_own_draws_and_the_schedule_skip_held_out_questions() -> None:
    m = mix()
    drawn = [ref for r in range(1, 80) for ref in m.sample(r, 4)]
    assert len(drawn) == 79 * 4
    assert not any(is_heldout(regenerate(ref)["question"], PERCENT) for ref in drawn)
    plain = mix(0)  # no partition: the same seed meets held-out questions
    assert any(
        is_heldout(regenerate(ref)["question"], PERCENT)
        for r in range(1, 80)
        for ref in plain.sample(r, 4)
    )
    schedule = SharedSchedule("lab", m, 120.0, clock=lambda: 0.0)
    scheduled = schedule.items(0, 0, 200)
    assert len(scheduled) == 200
    assert not any(is_heldout(regenerate(ref)["question"], PERCENT) for ref in scheduled)


def test_ingestion_refuses_held_out_questions() -> None:
    clock = Clock()
    queue = IngestQueue(SapoConfig(), Catalog([SPEC]), score, clock=clock, heldout_percent=PERCENT)
    inside, outside = heldout_index(True), heldout_index(False)
    assert queue.offer("peer", [make_group(inside, created=clock.now)]) == 0
    assert queue.stats.rejected["heldout"] == 1
    assert queue.offer("peer", [make_group(outside, created=clock.now)]) == 1
    lazy = IngestQueue(
        SapoConfig(verify="when_drawn"),
        Catalog([SPEC]),
        score,
        clock=clock,
        heldout_percent=PERCENT,
    )
    assert lazy.offer("peer", [make_group(inside, created=clock.now)]) == 0
    assert lazy.stats.rejected["heldout"] == 1
    # A forger that claims another question for a held-out item fails verification.
    forged = dataclasses.replace(
        make_group(inside, created=clock.now), question=make_group(outside).question
    )
    assert lazy.offer("peer", [forged]) == 1
    assert lazy.take([k for k, _ in lazy.snapshot()]) == []
    assert lazy.stats.rejected["question_mismatch"] == 1


def test_no_answer_to_a_held_out_question_is_kept_for_completion() -> None:
    book = AnswerBook(heldout_percent=PERCENT)
    inside, outside = heldout_index(True), heldout_index(False)
    assert book.add(dataclasses.replace(make_group(inside), origin="peer")) == 0
    assert book.add(dataclasses.replace(make_group(outside), origin="peer")) == 1


def test_evaluation_items_all_lie_inside_the_partition() -> None:
    cfg = parse_config({"tasks": {"datasets": [SPEC.model_dump()], "heldout_percent": PERCENT}})
    refs = heldout_refs(cfg, 20)
    questions = [regenerate(r)["question"] for r in refs]
    assert len(refs) == 20 and len(set(questions)) == 20
    assert all(r.seed == HELDOUT_SEED for r in refs)
    assert all(is_heldout(q, PERCENT) for q in questions)


def test_eval_records_every_item(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = parse_config(tiny_config(tiny_model_dir, tmp_path / "d", tasks={"heldout_percent": 50}))
    result = evaluate(cfg, n=3, base=True)
    records = result["records"]
    assert len(records) == result["items"] == 3
    keys = {"dataset", "config", "seed", "index", "question", "answer", "completion", "score"}
    assert all(set(r) == keys for r in records)
    assert all(is_heldout(r["question"], 50) for r in records)
    json.dumps(records)  # what heldout_items.jsonl is written from
