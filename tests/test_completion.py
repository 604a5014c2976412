"""The shared schedule and same-question group completion (peers' answers join our groups)."""

from __future__ import annotations

from dataclasses import replace

from swarmnode.config import DatasetSpec, SapoConfig, TasksConfig
from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.learn.rewards import make_scorer
from swarmnode.learn.tasks import SharedSchedule, TaskMix, regenerate
from swarmnode.share.completion import AnswerBook, GroupCompleter, complete_group
from swarmnode.share.ingest import Catalog, IngestQueue
from tests.helpers import CFG, SPEC, Clock

OTHER = DatasetSpec(name="chain_sum", size=500, config={"min_terms": 2, "max_terms": 2})


def tasks(weights: tuple[float, float]) -> TasksConfig:
    return TasksConfig(
        datasets=[
            SPEC.model_copy(update={"weight": weights[0]}),
            OTHER.model_copy(update={"weight": weights[1]}),
        ]
    )


def test_schedule_is_shared_within_a_swarm_and_bucket() -> None:
    clock = Clock()
    a = SharedSchedule("lab", TaskMix(tasks((1.0, 1.0))), 30.0, clock=clock)
    b = SharedSchedule("lab", TaskMix(tasks((9.0, 1.0))), 30.0, clock=clock)  # other weights
    other = SharedSchedule("elsewhere", TaskMix(tasks((1.0, 1.0))), 30.0, clock=clock)
    first = a.next(3)
    assert first == b.next(3) and len(set(first)) == 3
    assert other.next(3) != first
    assert {r.seed for r in first} == {a.seed} and a.seed < 2**31
    again = a.next(3)  # a second round in the same bucket takes the next items
    assert again == a.items(int(clock.now // 30), 3, 3) and set(again).isdisjoint(first)
    clock.now += 30  # a new bucket: new items, the same on every node
    assert a.next(2) == b.items(int(clock.now // 30), 0, 2) != first[:2]


def answer_group(ref: ItemRef, texts: list[str], rewards: list[float], origin: str) -> RolloutGroup:
    return RolloutGroup(ref, regenerate(ref)["question"], texts, rewards, origin=origin)


def local_all_wrong(ref: ItemRef) -> RolloutGroup:
    truth = int(regenerate(ref)["answer"])
    texts = [f"<answer>{truth + 100 + k}</answer>" for k in range(4)]
    ids = [[k + 1] for k in range(4)]
    return replace(answer_group(ref, texts, [0.0] * 4, "local"), completion_ids=ids)


def make_queue(book: AnswerBook) -> tuple[IngestQueue, Clock]:
    clock = Clock()
    return IngestQueue(
        SapoConfig(), Catalog([SPEC]), make_scorer(0.0), clock=clock, answers=book
    ), clock


def encode(text: str, finished: bool) -> list[int]:
    return [len(text), int(finished)]


def test_a_verified_right_answer_gives_an_all_wrong_group_signal() -> None:
    book = AnswerBook()
    queue, clock = make_queue(book)
    ref = ItemRef("basic_arithmetic", CFG, 5, 3)
    truth = regenerate(ref)["answer"]
    peer = answer_group(ref, [f"<answer>{truth}</answer>", "<answer>x</answer>"], [1.0, 0.0], "p")
    queue.offer("peerA", [replace(peer, created=clock.now)])
    mine = local_all_wrong(ref)
    assert not mine.has_signal
    merged, n = complete_group(mine, book, encode)
    assert n == 1 and merged.has_signal
    assert merged.completions[-1] == f"<answer>{truth}</answer>" and merged.rewards[-1] == 1.0
    assert merged.completion_ids is not None and len(merged.completion_ids) == 5
    assert merged.is_local and merged.ref == ref
    assert complete_group(mine, book, encode)[1] == 0  # an answer is used once


def test_other_items_forged_claims_and_altered_questions_never_merge() -> None:
    book = AnswerBook()
    queue, clock = make_queue(book)
    ref = ItemRef("basic_arithmetic", CFG, 5, 3)
    other = ItemRef("basic_arithmetic", CFG, 5, 4)
    right_other = f"<answer>{regenerate(other)['answer']}</answer>"
    wrong = f"<answer>{int(regenerate(ref)['answer']) + 7}</answer>"
    truth = f"<answer>{regenerate(ref)['answer']}</answer>"
    queue.offer(
        "peerA",
        [
            replace(answer_group(other, [right_other], [1.0], "p"), created=clock.now),
            # claims its wrong answer is right: re-scored 0, never an answer
            replace(answer_group(ref, [wrong, wrong + " "], [1.0, 1.0], "p"), created=clock.now),
            # the right answer to an altered question: refused before scoring
            replace(
                answer_group(ref, [truth], [1.0], "p"),
                question=regenerate(ref)["question"] + " ",
                created=clock.now,
            ),
        ],
    )
    assert queue.stats.rejected["question_mismatch"] == 1
    merged, n = complete_group(local_all_wrong(ref), book, encode)
    assert n == 0 and not merged.has_signal
    assert len(book) == 1  # only the other item's answer is kept


def test_per_peer_and_total_bounds() -> None:
    book = AnswerBook(max_per_peer=2)
    ref = ItemRef("basic_arithmetic", CFG, 5, 3)
    truth = regenerate(ref)["answer"]
    rights = [f"{'so ' * k}<answer>{truth}</answer>" for k in range(5)]
    assert book.add(answer_group(ref, rights, [1.0] * 5, "greedy")) == 2
    assert book.add(answer_group(ref, rights[2:], [1.0] * 3, "other")) == 2
    merged, n = complete_group(local_all_wrong(ref), book, encode, max_per_peer=1, max_total=4)
    assert n == 2 and set(merged.completions[-2:]) == {rights[0], rights[2]}  # one per peer
    _, n = complete_group(local_all_wrong(ref), book, encode, max_per_peer=2, max_total=1)
    assert n == 1


def test_a_group_without_answers_waits_one_round() -> None:
    book = AnswerBook()
    completer = GroupCompleter(book, encode, max_per_peer=2, max_total=4, max_pending=4)
    ref = ItemRef("basic_arithmetic", CFG, 5, 3)
    other = ItemRef("basic_arithmetic", CFG, 5, 8)
    ready, n = completer.prepare([local_all_wrong(ref)])
    assert n == 0 and len(ready) == 1 and not ready[0].has_signal
    truth = regenerate(ref)["answer"]
    book.add(answer_group(ref, [f"<answer>{truth}</answer>"], [1.0], "late"))
    ready, n = completer.prepare([local_all_wrong(other)])  # the next round
    assert n == 1 and ready[0].ref == ref and ready[0].has_signal  # signal first
    assert [g.ref for g in ready] == [ref, other]
    ready, n = completer.prepare([])  # the other group had its one retry
    assert (ready, n) == ([], 0)
