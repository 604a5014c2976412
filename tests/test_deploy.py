"""deploy/ stays true to the code: the compose swarm, the systemd unit and init.sh.

Nothing here runs Docker or systemd: the files are parsed, every command line goes
through the CLI's own parser, every config through ``load_config`` with the overrides
that command line passes, and ``deploy/init.sh`` really makes the keys (with the
``swarmnode`` of this environment), so a broken file fails here. tests/test_docker.py
(slow) builds the image and runs the compose swarm.
"""

from __future__ import annotations

import configparser
import ipaddress
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import typer
import yaml

from swarmnode.cli import app
from swarmnode.config import Config, load_config, parse_overrides

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"

# What a SIGTERM'd node may need before it exits, beyond the network and monitor
# timeouts read from the code: a LoRA checkpoint of a small model takes seconds.
CHECKPOINT_ALLOWANCE_S = 60.0
TRANSPORT_JOIN_MARGIN_S = 5.0  # p2p/transport.py: join timeout = shutdown_timeout_s + 5


def stop_need_s(cfg: Config) -> float:
    """Seconds from SIGTERM to exit that the code may use for this config."""
    from swarmnode.ops.monitor import SHUTDOWN_S

    need = cfg.swarm.shutdown_timeout_s + TRANSPORT_JOIN_MARGIN_S if cfg.swarm.enabled else 0.0
    need += SHUTDOWN_S if cfg.monitor.enabled else 0.0
    if not (cfg.swarm.enabled and cfg.swarm.role == "bootstrap"):
        need += CHECKPOINT_ALLOWANCE_S
    return need


def cli_params(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """Parse ``swarmnode <argv>`` with the CLI's own parser: (subcommand, its params)."""
    group: Any = typer.main.get_command(app)  # typer's own (vendored) click group
    root = group.make_context("swarmnode", list(argv))
    name = argv[0]
    command = group.get_command(root, name)
    assert command is not None, f"swarmnode has no subcommand {name!r}"
    ctx = command.make_context(name, list(argv[1:]), parent=root)  # raises on a bad option
    return name, ctx.params


def config_of(params: dict[str, Any], path: Path) -> Config:
    """Load ``path`` with the overrides that ``swarmnode start``/``id``/``eval`` apply."""
    given = {
        "node.max_rounds": params.get("max_rounds"),
        "node.data_dir": params.get("data_dir") and str(params["data_dir"]),
    }
    given = {k: v for k, v in given.items() if v is not None}
    return load_config(path, {**parse_overrides(params.get("set_") or []), **given})


def seconds(text: str | int) -> float:
    """A compose duration ('2m', '90s', '1m30s') or a systemd time span in seconds."""
    if isinstance(text, int) or str(text).isdigit():
        return float(text)
    parts = re.fullmatch(r"(?:(\d+)min|(\d+)m)?(?:(\d+)s)?", str(text).strip())
    assert parts and any(parts.groups()), f"not a duration: {text!r}"
    minutes = int(parts.group(1) or parts.group(2) or 0)
    return 60.0 * minutes + int(parts.group(3) or 0)


# ---------------------------------------------------------------------------- init.sh


@pytest.fixture(scope="module")
def initialised(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of deploy/ on which init.sh ran (twice: it must be idempotent)."""
    root = tmp_path_factory.mktemp("deploy") / "deploy"
    shutil.copytree(DEPLOY, root, ignore=shutil.ignore_patterns("secrets", ".env"))
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "SWARMNODE_INIT": "local",  # this environment's swarmnode, never an image
    }
    assert shutil.which("swarmnode", path=env["PATH"]), "no swarmnode next to this python"
    first = subprocess.run(
        ["sh", str(root / "init.sh")], env=env, capture_output=True, text=True, timeout=120
    )
    assert first.returncode == 0, first.stderr
    psk_before = (root / "secrets" / "swarm.key").read_bytes()
    env_before = (root / ".env").read_text()
    again = subprocess.run(
        ["sh", str(root / "init.sh")], env=env, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    assert (root / "secrets" / "swarm.key").read_bytes() == psk_before, "PSK was replaced"
    assert (root / ".env").read_text() == env_before, "bootstrap peer id changed"
    return root


def dotenv(root: Path) -> dict[str, str]:
    lines = (root / ".env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def image_uid() -> int:
    """The uid the image's node runs as (the Dockerfile's ARG SWARMNODE_UID, its USER)."""
    text = (REPO / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0"), f"the image runs as {users or 'root'}"
    uid = re.search(r"^ARG SWARMNODE_UID=(\d+)$", text, re.M)
    assert uid, "Dockerfile: no ARG SWARMNODE_UID"
    return int(uid.group(1))


def test_init_makes_the_keys_compose_names(initialised: Path) -> None:
    from swarmnode.p2p.identity import load_identity, load_psk, peer_id_of

    psk = initialised / "secrets" / "swarm.key"
    load_psk(psk)  # a valid swarm.key
    identity = initialised / "secrets" / "bootstrap" / "identity.key"
    assert stat.S_IMODE(identity.stat().st_mode) == 0o600
    assert dotenv(initialised)["BOOTSTRAP_PEER_ID"] == peer_id_of(load_identity(identity))
    # Compose v1 refuses a top-level `name:`; both versions read the project name here.
    assert dotenv(initialised)["COMPOSE_PROJECT_NAME"] == "swarmnode"


def test_init_gives_the_keys_to_the_image_user(initialised: Path) -> None:
    """A compose secret is the host file, mounted: the node (not root) must own it, as
    swarmnode reads an identity key only when no one else can (mode 0600)."""
    if os.geteuid() != 0:
        pytest.skip("init.sh gives the keys away only as root (it says so otherwise)")
    wanted = image_uid()
    assert f"SWARMNODE_UID:-{wanted}" in (DEPLOY / "init.sh").read_text()
    for key in ("swarm.key", "bootstrap/identity.key"):
        assert (initialised / "secrets" / key).stat().st_uid == wanted, key


def test_dockerignore_sends_only_what_the_image_copies() -> None:
    """The build context: what COPY names, never .git, tests, docs or deploy/secrets."""
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert patterns[0] == "*", "not an allowlist: everything new would be sent"
    kept = {p[1:].strip("/") for p in patterns if p.startswith("!")}
    for path in kept:
        assert not path.startswith((".git", "tests", "docs", "deploy", ".venv", "data")), path
    copied = re.findall(r"^COPY\s+(.+)\s+\S+$", (REPO / "Dockerfile").read_text(), re.M)
    for sources in copied:
        for src in sources.split():
            assert src.strip("./") in kept, f"COPY {src}: left out of the build context"


def test_init_outputs_are_ignored_by_git() -> None:
    ignored = subprocess.run(
        ["git", "check-ignore", "deploy/secrets/swarm.key", "deploy/.env"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert ignored.stdout.split() == ["deploy/secrets/swarm.key", "deploy/.env"]


# ---------------------------------------------------------------------- compose.yaml


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ${VAR}, ${VAR:?err}, ${VAR:-default} on every string of ``value``."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        assert op == ":-", f"${{{name}}} is not set by init.sh ({arg})"
        return arg

    return re.sub(r"\$\{(\w+)(?:(:\?|:-)([^}]*))?\}", one, value)


@pytest.fixture(scope="module")
def compose(initialised: Path) -> dict[str, Any]:
    data = yaml.safe_load((initialised / "compose.yaml").read_text())
    return dict(interpolate(data, dotenv(initialised)))


def binds(service: dict[str, Any], root: Path) -> dict[str, Path]:
    """Container path -> host file of the service's bind mounts (./x:/y[:ro])."""
    out = {}
    for spec in service.get("volumes", []):
        source, target, *_ = spec.split(":")
        if source.startswith((".", "/")):
            out[target] = (root / source).resolve()
    return out


def service_configs(compose: dict[str, Any], root: Path) -> dict[str, Config]:
    out = {}
    for name, svc in compose["services"].items():
        sub, params = cli_params([str(a) for a in svc["command"]])
        assert sub == "start", f"{name}: runs {sub!r}, not start"
        config = str(params["config"])
        host = binds(svc, root).get(config)
        assert host is not None and host.is_file(), f"{name}: {config} is not a mounted file"
        out[name] = config_of(params, host)
    return out


def test_every_service_starts_a_valid_config(compose: dict[str, Any], initialised: Path) -> None:
    cfgs = service_configs(compose, initialised)
    roles = [c.swarm.role for c in cfgs.values()]
    assert roles.count("bootstrap") == 1 and roles.count("trainer") >= 2, roles
    assert len({c.swarm.name for c in cfgs.values()}) == 1, "one swarm name for all"
    for name, svc in compose["services"].items():
        build = svc.get("build")
        assert build, f"{name}: no build (the image would be pulled)"
        assert (DEPLOY / build["context"] / build.get("dockerfile", "Dockerfile")).is_file()
        assert svc.get("init") is True, f"{name}: no init to forward SIGTERM"
        for spec in svc.get("volumes", []):
            source = spec.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in compose["volumes"], f"{name}: volume {source} not declared"


def test_psk_and_identity_are_mounted_secrets(compose: dict[str, Any], initialised: Path) -> None:
    from swarmnode.p2p.identity import load_identity, load_psk

    declared = compose["secrets"]
    for name, cfg in service_configs(compose, initialised).items():
        mounted = compose["services"][name].get("secrets", [])
        keys = {"psk_file": cfg.swarm.psk_file}
        if cfg.swarm.role == "bootstrap":
            keys["key_file"] = cfg.swarm.key_file
        for field, path in keys.items():
            assert path, f"{name}: swarm.{field} is not set"
            where = PurePosixPath(path)
            assert where.parent == PurePosixPath("/run/secrets"), f"{name}: {field}={path}"
            assert where.name in mounted, f"{name}: secret {where.name} not mounted"
            assert where.name in declared, f"secret {where.name} not declared"
            host = initialised / declared[where.name]["file"]
            assert host.is_file(), f"{host}: init.sh does not make it"
            load_psk(host) if field == "psk_file" else load_identity(host)


def test_trainers_find_the_bootstrap_node(compose: dict[str, Any], initialised: Path) -> None:
    from multiaddr import Multiaddr

    cfgs = service_configs(compose, initialised)
    boot = next(n for n, c in cfgs.items() if c.swarm.role == "bootstrap")
    ip = compose["services"][boot]["networks"]["swarm"]["ipv4_address"]
    subnet = compose["networks"]["swarm"]["ipam"]["config"][0]["subnet"]
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(subnet)
    port = Multiaddr(cfgs[boot].swarm.listen[0]).value_for_protocol("tcp")
    peer_id = dotenv(initialised)["BOOTSTRAP_PEER_ID"]
    for name, cfg in cfgs.items():
        if name == boot:
            continue
        want = f"/ip4/{ip}/tcp/{port}/p2p/{peer_id}"
        assert cfg.swarm.bootstrap == [want], f"{name}: {cfg.swarm.bootstrap}"
        assert "swarm" in compose["services"][name]["networks"]


def test_every_node_announces_its_own_address(compose: dict[str, Any], initialised: Path) -> None:
    """Listening on 0.0.0.0, a node advertises 127.0.0.1 unless it announces an address:
    a trainer then dials itself for the other. Each one announces its fixed address."""
    from multiaddr import Multiaddr

    subnet = ipaddress.ip_network(compose["networks"]["swarm"]["ipam"]["config"][0]["subnet"])
    assert "name" not in compose, "a top-level name: (Compose v1 refuses it; init.sh sets it)"
    seen = set()
    for name, cfg in service_configs(compose, initialised).items():
        ip = compose["services"][name]["networks"]["swarm"]["ipv4_address"]
        assert ipaddress.ip_address(ip) in subnet, f"{name}: {ip} not in {subnet}"
        port = Multiaddr(cfg.swarm.listen[0]).value_for_protocol("tcp")
        assert cfg.swarm.announce == [f"/ip4/{ip}/tcp/{port}"], f"{name}: {cfg.swarm.announce}"
        seen.add(ip)
    assert len(seen) == len(compose["services"]), "two nodes on one address"


def test_trainers_differ_where_they_must(compose: dict[str, Any], initialised: Path) -> None:
    cfgs = service_configs(compose, initialised)
    trainers = {n: c for n, c in cfgs.items() if c.swarm.role == "trainer"}
    seeds = [(c.tasks.seed, c.train.seed) for c in trainers.values()]
    assert len(set(seeds)) == len(seeds), f"trainers share seeds: {seeds}"
    data = [
        next(v.split(":")[0] for v in compose["services"][n]["volumes"] if ":/data" in v)
        for n in trainers
    ]
    assert len(set(data)) == len(data), f"trainers share a data volume: {data}"
    ports = [p for svc in compose["services"].values() for p in svc.get("ports", [])]
    host_ports = [p.rsplit(":", 1)[0] for p in ports]
    assert len(set(host_ports)) == len(host_ports), f"a host port twice: {ports}"


def test_stop_grace_lets_a_node_checkpoint(compose: dict[str, Any], initialised: Path) -> None:
    for name, cfg in service_configs(compose, initialised).items():
        grace = compose["services"][name].get("stop_grace_period")
        assert grace is not None, f"{name}: docker's default 10 s grace would cut the save"
        assert seconds(grace) >= stop_need_s(cfg), f"{name}: {grace} < {stop_need_s(cfg)} s"


# ------------------------------------------------------------------ swarmnode.service


UNIT = DEPLOY / "swarmnode.service"


def unit() -> tuple[configparser.SectionProxy, dict[str, Any], Config]:
    """The unit's [Service], its ExecStart's params, and the config it runs.

    ExecStart reads /etc/swarmnode/...; the unit's header says which file of configs/
    is installed there (``install -D -m 0644 configs/X.yaml /etc/swarmnode/...``)."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    service = parser["Service"]
    argv = shlex.split(service["ExecStart"])
    assert PurePosixPath(argv[0]).name == "swarmnode", argv[0]
    sub, params = cli_params(argv[1:])
    assert sub == "start", f"ExecStart runs {sub!r}"
    installs = re.findall(r"install -D -m 0644 (configs/\S+\.yaml) (\S+)", UNIT.read_text())
    source = {dest: src for src, dest in installs}.get(str(params["config"]))
    assert source, f"the unit's header does not install {params['config']}"
    return service, params, config_of(params, REPO / source)


def test_unit_runs_the_installed_config_where_it_may_write() -> None:
    service, _, cfg = unit()
    assert service["User"] not in ("", "root")
    assert service["ProtectSystem"] == "strict" and service["NoNewPrivileges"] == "yes"
    # ProtectSystem=strict: only the state and cache directories are writable.
    work = PurePosixPath(service["WorkingDirectory"])
    state = PurePosixPath("/var/lib") / service["StateDirectory"]
    cache = PurePosixPath("/var/cache") / service["CacheDirectory"]
    assert work == state, "relative paths in the config must land in the state directory"
    data_dir = PurePosixPath(os.path.normpath(work / cfg.node.data_dir))
    assert data_dir.is_relative_to(state), f"data_dir {data_dir} is read-only under the unit"
    env = dict(kv.split("=", 1) for kv in shlex.split(service["Environment"]))
    assert PurePosixPath(env["SWARMNODE_CACHE"]).is_relative_to(cache)
    if cfg.swarm.psk_file:  # the header's keygen writes where the config reads
        psk = PurePosixPath(os.path.normpath(work / cfg.swarm.psk_file))
        keygen = re.search(r"swarmnode keygen --psk --data-dir (\S+)", UNIT.read_text())
        assert keygen and PurePosixPath(keygen.group(1)) / "swarm.key" == psk


def test_unit_stop_timeout_covers_the_save() -> None:
    service, _, cfg = unit()
    assert seconds(service["TimeoutStopSec"]) >= stop_need_s(cfg)
    assert service.get("KillSignal", "SIGTERM") == "SIGTERM"
    assert service["Restart"] == "on-failure"
    assert "2" in service["RestartPreventExitStatus"].split()  # a bad config: no restart loop
