"""``--set KEY=VALUE``: config overrides from the command line (what deploy/ relies on)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmnode.cli import app
from swarmnode.config import ConfigError, load_config, parse_overrides

REPO = Path(__file__).resolve().parents[1]


def test_parse_overrides_reads_yaml_values() -> None:
    got = parse_overrides(["tasks.seed=3", "swarm.bootstrap=[/ip4/1.2.3.4/tcp/1/p2p/X]", "a.b="])
    assert got == {"tasks.seed": 3, "swarm.bootstrap": ["/ip4/1.2.3.4/tcp/1/p2p/X"], "a.b": None}


@pytest.mark.parametrize("bad", ["tasks.seed", "=3", "tasks..seed=1", "tasks.seed=[1"])
def test_parse_overrides_refuses_in_one_line(bad: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_overrides([bad])
    assert str(err.value).startswith("--set ") and "\n" not in str(err.value)


def test_override_under_a_non_mapping_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("node:\n  name: x\n")
    with pytest.raises(ConfigError, match=r"node\.name: must be a mapping to set node\.name\.x"):
        load_config(path, {"node.name.x": 1})
    path.write_text("node:\n")  # an empty section with --data-dir: was a TypeError
    with pytest.raises(ConfigError, match=r"node: must be a mapping to set node\.data_dir"):
        load_config(path, {"node.data_dir": "d"})


def test_cli_set_reaches_the_config(tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["id", "-c", str(REPO / "configs" / "bootstrap.yaml"), "--data-dir", str(tmp_path)]
    ok = runner.invoke(app, [*args, "--set", "swarm.listen=[/ip4/127.0.0.1/tcp/4555]"])
    assert ok.exit_code == 0, ok.output
    assert "/ip4/127.0.0.1/tcp/4555/p2p/" in ok.output
    bad = runner.invoke(app, [*args, "--set", "swarm.lisen=[]"])
    assert bad.exit_code == 2 and "swarm.lisen: unknown key" in bad.output
