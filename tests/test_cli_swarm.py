"""The swarm-side CLI commands as a user runs them: keygen, id, status, peers."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from tests.helpers import Proc, run_cli, tiny_config, wait_until, write_config


def test_keygen_id_and_no_node(tmp_path: Path) -> None:
    data = tmp_path / "d"
    made = run_cli("keygen", "--data-dir", str(data))
    assert made.returncode == 0 and "created identity" in made.stdout
    pid = made.stdout.split("peer id: ")[1].strip()
    assert stat.S_IMODE(os.stat(data / "identity.key").st_mode) == 0o600
    kept = run_cli("keygen", "--data-dir", str(data))
    assert "kept existing" in kept.stdout and pid in kept.stdout
    psk = run_cli("keygen", "--psk", "--data-dir", str(data))
    assert psk.returncode == 0 and (data / "swarm.key").read_text().startswith("/key/swarm/psk/")
    again = run_cli("keygen", "--psk", "--data-dir", str(data))  # never overwrites a key
    assert again.returncode == 2 and "already exists" in again.stderr

    cfg = write_config(
        tmp_path / "n.yaml",
        {
            "node": {"data_dir": str(data)},
            "swarm": {"enabled": True, "listen": ["/ip4/127.0.0.1/tcp/4321"]},
        },
    )
    shown = run_cli("id", "--config", str(cfg))
    assert shown.returncode == 0, shown.stderr
    assert f"peer id: {pid}" in shown.stdout
    assert f"/ip4/127.0.0.1/tcp/4321/p2p/{pid}" in shown.stdout

    for cmd in ("status", "peers"):
        out = run_cli(cmd, "--data-dir", str(data))
        assert out.returncode == 1 and "no node running" in out.stderr
    bad = write_config(tmp_path / "b.yaml", {"swarm": {"role": "bootstrap"}})
    out = run_cli("start", "--config", str(bad))
    assert out.returncode == 2 and "swarm.role" in out.stderr and "enabled" in out.stderr


def test_status_of_a_node_training_alone(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path / "d",
        swarm={"min_round_s": 0.3},
        sapo={"external_groups": 1},
        checkpoint={"every_rounds": 100},
    )
    n = Proc(write_config(tmp_path / "n.yaml", cfg), tmp_path / "d")
    try:
        wait_until(lambda: (n.node().get("last_round") or {}).get("round", 0) >= 2, "2 rounds")
        reply = json.loads(run_cli("status", "--data-dir", str(tmp_path / "d"), "--json").stdout)
        assert reply["swarm"] is None and reply["node"]["state"] == "training"
        last = reply["node"]["last_round"]
        assert last["external_groups"] == 0 and last["external_shortfall"] == 1
        text = run_cli("status", "--data-dir", str(tmp_path / "d")).stdout
        assert "swarm disabled" in text and "external_shortfall=1" in text
        peers = run_cli("peers", "--data-dir", str(tmp_path / "d")).stdout
        assert "trains alone" in peers
        # A second node on the same data_dir is refused while the first runs.
        second = run_cli("start", "--config", str(tmp_path / "n.yaml"))
        assert second.returncode == 2 and "another node is running" in second.stderr
        assert n.stop() == 0
    finally:
        if n.proc.poll() is None:
            n.proc.kill()
            n.proc.wait(timeout=30)
