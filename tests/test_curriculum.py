"""The curriculum moves a dataset up when it is mastered, down when it is lost."""

from __future__ import annotations

from swarmnode.config import CurriculumConfig, DatasetSpec, TasksConfig
from swarmnode.learn.curriculum import Curriculum
from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.learn.tasks import SharedSchedule, TaskMix, regenerate
from swarmnode.share.ingest import Catalog
from tests.helpers import Clock

CHAIN = DatasetSpec(
    name="chain_sum",
    size=500,
    config={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
    levels=[{"min_digits": 2, "max_digits": 2}, {"min_terms": 3, "max_terms": 3}],
)
OTHER = DatasetSpec(name="basic_arithmetic", size=500, config={"min_terms": 2, "max_terms": 2})


def mix() -> TaskMix:
    return TaskMix(TasksConfig(datasets=[CHAIN, OTHER]))


def group(ref: ItemRef, right: int, wrong: int, origin: str = "local") -> RolloutGroup:
    return RolloutGroup(ref, "q", ["c"] * (right + wrong), [1.0] * right + [0.0] * wrong, origin)


def test_promotes_when_mastered_and_demotes_when_lost() -> None:
    m = mix()
    cur = Curriculum(CurriculumConfig(window=8, promote_at=0.75, demote_at=0.1), m, 0.0)
    chain0 = ItemRef("chain_sum", m.configs[0], 0, 1)
    assert cur.observe([group(chain0, 6, 2)]) == ["0:chain_sum 0 -> 1 (acc 0.75)"]
    assert m.levels == [1, 0]
    refs = [r for r in m.sample(5, 40) if r.dataset == "chain_sum"]
    assert refs and all(r.config["min_digits"] == 2 for r in refs)  # harder items now
    assert cur.observe([group(chain0, 8, 0)]) == []  # level-0 items no longer count
    chain1 = ItemRef("chain_sum", m.configs[0], 0, 2)
    assert cur.observe([group(chain1, 0, 4)]) == []  # the window restarted: 4 < 8
    assert cur.observe([group(chain1, 0, 4)]) == ["0:chain_sum 1 -> 0 (acc 0.00)"]


def test_top_level_stays_and_peers_groups_do_not_count() -> None:
    m = mix()
    cur = Curriculum(CurriculumConfig(window=8), m, 0.0)
    m.levels[0] = 2
    top = ItemRef("chain_sum", m.configs[0], 0, 1)
    assert cur.observe([group(top, 8, 0)]) == [] and m.levels[0] == 2
    m = mix()
    cur = Curriculum(CurriculumConfig(window=8), m, 0.0)
    peer = group(ItemRef("chain_sum", m.configs[0], 0, 1), 8, 0, origin="peerA")
    assert cur.observe([peer]) == [] and m.levels == [0, 0]


def test_every_level_is_verifiable_by_peers_and_restored_after_restart() -> None:
    m = mix()
    catalog = Catalog([CHAIN, OTHER])
    for config in m.level_configs[0]:
        ref = ItemRef("chain_sum", config, 9, 3)
        assert catalog.canonical(ref) is not None and regenerate(ref)["question"]
    cur = Curriculum(CurriculumConfig(), m, 0.0)
    cur.restore({"0:chain_sum": 2, "1:basic_arithmetic": 7, "junk": 1})  # 7: out of range
    assert m.levels == [2, 0] and cur.levels() == {"0:chain_sum": 2, "1:basic_arithmetic": 0}
    sched = SharedSchedule("lab", m, 60.0, clock=Clock())
    items = [r for r in sched.items(0, 0, 20) if r.dataset == "chain_sum"]
    assert items and all(r.config == m.level_configs[0][2] for r in items)
