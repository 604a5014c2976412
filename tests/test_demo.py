"""The demo's summary reads the nodes' metrics.jsonl (typed RoundRecords)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarmnode.lab import demo


def test_summary_prints_each_node_from_its_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "node-0").mkdir()
    lines = [
        {"round": r, "reward_mean": r / 10, "external_groups": 2, "external_peers": r}
        for r in (1, 2, 3)
    ]
    (tmp_path / "node-0" / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    demo.summary(tmp_path, 2)
    out = capsys.readouterr().out.splitlines()
    assert out[-2].split() == ["node-0", "3", "0.200", "0.200", "6", "3"]
    assert out[-1] == "node-1  no rounds"
