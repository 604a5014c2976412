"""The Docker image, built and run, and deploy/compose.yaml brought up (slow).

Builds the image offline from the local Debian base (``scripts/docker_build.sh``, which
runs ``scripts/docker_base.sh``: both keep what they made, so a second run only rebuilds
changed layers), runs ``swarmnode --help`` and a 2-round node on the embedded model in
it with no network, and runs the compose swarm until each trainer has trained on the
other's groups over a direct connection. Skips, with the reason in one line, when no
Docker daemon can be reached or started or the base image cannot be made. Every wait
has a timeout; no assert is on wall-clock time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
IMAGE = os.environ.get("SWARMNODE_TEST_IMAGE", "swarmnode:test")
BASE_S = 1800  # debootstrap the first time; seconds when the base image exists
BUILD_S = 3600  # the wheelhouse (pip, from the indexes) and the build the first time
NODE_S = 900  # a 2-round node on the embedded model (dequantizing it first)
SWARM_S = 2400  # the compose swarm: dequantize, then rounds until groups crossed
POLL_S = 10.0


def run(argv: list[str], timeout: float, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


def tail(proc: subprocess.CompletedProcess[str], n: int = 30) -> str:
    return "\n".join((proc.stdout + proc.stderr).splitlines()[-n:])


@pytest.fixture(scope="module")
def image() -> str:
    """The image, built from the local base; skip if Docker or the base cannot be had."""
    if shutil.which("docker") is None and os.geteuid() != 0:
        pytest.skip("no docker CLI here, and installing Debian's docker.io needs root")
    base = run(["sh", str(REPO / "scripts" / "docker_base.sh")], BASE_S)
    if base.returncode != 0:
        reason = (base.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"no Docker daemon or base image: {reason}")
    built = run(["sh", str(REPO / "scripts" / "docker_build.sh"), IMAGE], BUILD_S)
    assert built.returncode == 0, tail(built)
    print(*(ln for ln in built.stderr.splitlines() if ln.startswith("docker_build.sh: built")))
    return IMAGE


@pytest.fixture
def volumes() -> Iterator[list[str]]:
    """Named volumes a test makes; removed after it."""
    made: list[str] = []
    yield made
    for name in made:
        run(["docker", "volume", "rm", "-f", name], 60)


def volume(made: list[str], role: str) -> str:
    name = f"swarmnode-test-{role}-{uuid.uuid4().hex[:8]}"
    made.append(name)
    return name


def records(metrics: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in metrics.splitlines() if line.strip()]


def test_help_runs_offline_as_a_user(image: str) -> None:
    shown = run(["docker", "run", "--rm", "--network", "none", image, "--help"], 120)
    assert shown.returncode == 0, tail(shown)
    assert "start" in shown.stdout and "keygen" in shown.stdout
    uid = run(["docker", "run", "--rm", "--entrypoint", "id", image, "-u"], 120)
    assert uid.returncode == 0 and uid.stdout.strip() not in ("", "0"), uid.stdout


def test_a_node_trains_offline_and_the_cache_volume_is_reused(
    image: str, volumes: list[str]
) -> None:
    data, cache = volume(volumes, "data"), volume(volumes, "cache")
    mounts = ["-v", f"{data}:/data", "-v", f"{cache}:/cache"]
    start = ["start", "--config", "configs/node.yaml", "--data-dir", "/data/node"]

    def node(rounds: int) -> subprocess.CompletedProcess[str]:
        argv = ["docker", "run", "--rm", "--network", "none", *mounts, image, *start]
        return run([*argv, "--max-rounds", str(rounds)], NODE_S)

    first = node(2)
    assert first.returncode == 0, tail(first)
    assert "dequantizing" in first.stderr + first.stdout, "a new cache volume was not filled"
    # A new container on the same volumes: the dequantized model is not made again,
    # and the node resumes from its round-2 checkpoint.
    second = node(3)
    assert second.returncode == 0, tail(second)
    assert "dequantizing" not in second.stderr + second.stdout, "the cache volume was not reused"
    cat = ["--entrypoint", "cat", image, "/data/node/metrics.jsonl"]
    shown = run(["docker", "run", "--rm", *mounts, *cat], 120)
    assert shown.returncode == 0, tail(shown)
    assert [r["round"] for r in records(shown.stdout)] == [1, 2, 3]


# ------------------------------------------------------------------------ compose


def compose_cli() -> list[str] | None:
    """``docker compose`` (v2) if the CLI has it, else Debian's ``docker-compose`` (v1)."""
    if run(["docker", "compose", "version"], 60).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_trainers_train_on_each_others_groups(image: str, tmp_path: Path) -> None:
    cli = compose_cli()
    if cli is None:
        pytest.skip("neither `docker compose` nor docker-compose is installed")
    root = tmp_path / "deploy"
    shutil.copytree(REPO / "deploy", root, ignore=shutil.ignore_patterns("secrets", ".env"))
    env = {**os.environ, "SWARMNODE_IMAGE": image}
    made = run(["sh", str(root / "init.sh")], 600, env=env)
    assert made.returncode == 0, tail(made)

    # deploy/compose.yaml as it is, but for the test's host: no published ports (another
    # test may hold 4001 or 9464 here), an internal network (no route off this host),
    # and one torch thread a trainer (two trainers' thread pools on a small shared
    # machine oversubscribe it: 430 s to generate one round with torch's default).
    spec = yaml.safe_load((root / "compose.yaml").read_text())
    for name, svc in spec["services"].items():
        svc.pop("ports", None)
        svc["build"]["context"] = str(REPO)
        if name != "bootstrap":
            svc["command"] += ["--set", "model.threads=1"]
    spec["networks"]["swarm"]["internal"] = True
    (root / "compose.test.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    compose = [*cli, "-p", f"swarmnodetest{os.getpid()}", "-f", str(root / "compose.test.yaml")]

    up = run([*compose, "up", "-d", "--no-build"], 600, env=env, cwd=root)
    try:
        assert up.returncode == 0, tail(up)
        trainers = ["trainer-1", "trainer-2"]
        ids = {}
        for name in trainers:
            ps = run([*compose, "ps", "-q", name], 60, env=env, cwd=root)
            assert ps.returncode == 0 and ps.stdout.strip(), tail(ps)
            ids[name] = ps.stdout.strip()
        crossed = wait_until_groups_cross(ids, SWARM_S)
        print(f"groups crossed: {crossed}")
        logs = run([*compose, "logs", "--no-color"], 120, env=env, cwd=root)
        assert "handshake failed" not in logs.stdout, (
            "a node dialled an address that is not its peer"
        )
        for name, view in crossed.items():  # not relayed, nor only through the bootstrap
            assert view["connection"] == "direct", f"{name}: {view}"
    except BaseException:
        logs = run([*compose, "logs", "--no-color", "--tail", "40"], 120, env=env, cwd=root)
        print(logs.stdout[-20000:])
        raise
    finally:
        down = [*compose, "down", "-v", "--remove-orphans", "-t", "120"]
        gone = run(down, 600, env=env, cwd=root)
        assert gone.returncode == 0, tail(gone)


def exec_in(container: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return run(["docker", "exec", container, *argv], 120)


def wait_until_groups_cross(ids: dict[str, str], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Poll both trainers until each is connected to the other and has trained on at
    least one of its groups (metrics.jsonl ``external_by_peer``); fail at the timeout."""
    deadline = time.monotonic() + timeout_s
    seen: dict[str, Any] = {}
    while True:
        views = {}
        for name, container in ids.items():
            peers = exec_in(container, "swarmnode", "peers", "--data-dir", "/data/node", "--json")
            metrics = exec_in(container, "cat", "/data/node/metrics.jsonl")
            if peers.returncode != 0 or metrics.returncode != 0:
                break  # not answering yet (still loading the model)
            views[name] = (json.loads(peers.stdout), records(metrics.stdout))
        if len(views) == len(ids):
            me = {name: view[0]["peer_id"] for name, view in views.items()}
            out: dict[str, dict[str, Any]] = {}
            for name, (peers, rounds) in views.items():
                other = next(p for n, p in me.items() if n != name)
                from_other = sum(r.get("external_by_peer", {}).get(other, 0) for r in rounds)
                out[name] = {
                    "rounds": len(rounds),
                    "groups_from_other": from_other,
                    "connected": other in peers.get("connected_peers", []),
                    "connection": (peers.get("nat") or {}).get("connections", {}).get(other),
                }
            seen = out
            if all(v["connected"] and v["groups_from_other"] > 0 for v in out.values()):
                return out
        assert time.monotonic() < deadline, f"groups did not cross in {timeout_s:.0f} s: {seen}"
        time.sleep(POLL_S)
