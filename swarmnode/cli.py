"""The ``swarmnode`` command: thin, typed, and quick to answer ``--help``.

Invariants:
- Nothing heavy (torch, transformers, libp2p) is imported before arguments parse.
- ``status``/``peers`` only read the node's control socket (loopback, read-only);
  no node running there is one line and exit 1.
- Every ``SwarmnodeError`` prints one line and exits with its ``exit_code`` (2: a
  bad config field, key file or model, a data_dir in use; 1: the network side
  failed); tracebacks are for bugs only.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    help="swarmnode: collective RL of language models over libp2p (SAPO).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="Node YAML config file.")]
DataDirOpt = Annotated[
    Path | None, typer.Option("--data-dir", help="Override node.data_dir from the config.")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Override one config field: dotted key, YAML value (tasks.seed=3); repeatable.",
    ),
]


@app.callback()
def _root() -> None:
    """swarmnode: collective RL of language models over libp2p (SAPO)."""


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _load(config: Path, overrides: dict[str, Any], sets: list[str] | None = None) -> Any:
    """The config with ``--set`` overrides, then the dedicated options (which win)."""
    from swarmnode.config import ConfigError, load_config, parse_overrides

    try:
        given = {k: v for k, v in overrides.items() if v is not None}
        return load_config(config, {**parse_overrides(sets or []), **given})
    except ConfigError as err:
        raise _fail(str(err)) from None


def _logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    for noisy in ("httpx", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@app.command()
def start(
    config: ConfigOpt,
    max_rounds: Annotated[
        int | None, typer.Option("--max-rounds", help="Stop after this round number.")
    ] = None,
    data_dir: DataDirOpt = None,
    set_: SetOpt = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
) -> None:
    """Run a node: train on local tasks, and share with a swarm if configured.

    With swarm.role 'bootstrap' it only routes gossip (no model is loaded)."""
    cfg = _load(
        config,
        {"node.max_rounds": max_rounds, "node.data_dir": data_dir and str(data_dir)},
        set_,
    )
    _logging(log_level)
    # `kill -USR1 <pid>` prints every thread's stack to stderr: for a node that seems stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    from swarmnode.daemon import run_daemon
    from swarmnode.errors import SwarmnodeError

    try:
        if cfg.swarm.enabled and cfg.swarm.role == "bootstrap":
            from swarmnode.bootstrap import BootstrapNode

            run_daemon(BootstrapNode(cfg))
        else:
            from swarmnode.node import Node

            run_daemon(Node(cfg))
    except SwarmnodeError as err:
        raise _fail(err.one_line(), err.exit_code) from None


@app.command("eval")
def eval_(
    config: ConfigOpt,
    data_dir: DataDirOpt = None,
    set_: SetOpt = None,
    items: Annotated[int, typer.Option(help="Held-out items per dataset.", min=1)] = 50,
    json_: Annotated[bool, typer.Option("--json", help="Print the raw result.")] = False,
) -> None:
    """Score the node's newest checkpoint on held-out items (seeds no node trains on)."""
    cfg = _load(config, {"node.data_dir": data_dir and str(data_dir)}, set_)
    _logging("warning")
    logging.getLogger("swarmnode.learn.progress").setLevel(logging.INFO)  # lines where no TTY
    from swarmnode.errors import SwarmnodeError
    from swarmnode.learn.evaluate import evaluate

    try:
        result = evaluate(cfg, n=items)
    except SwarmnodeError as err:
        raise _fail(err.one_line(), err.exit_code) from None
    if json_:
        typer.echo(json.dumps(result, indent=1))
        return
    typer.echo(
        f"checkpoint round {result['round']}, {result['items']} held-out items, strict "
        f"accuracy (score 1.0); {result['seen_in_training']:.0%} of the questions also "
        "occur in training"
    )
    for name, d in sorted(result["per_dataset"].items()):
        flag = "  COLLAPSED: one answer for most items" if d["collapsed"] else ""
        typer.echo(f"  {name:<28} {d['accuracy']:.3f}  (mean score {d['mean_score']:.3f}){flag}")
    lo, hi = result["interval"]
    typer.echo(f"  {'all (95% interval)':<28} {result['accuracy']:.3f}  ({lo:.3f}-{hi:.3f})")


def _data_dir(config: Path | None, data_dir: Path | None) -> Path:
    if data_dir is not None:
        return data_dir
    if config is None:
        raise _fail("give --config or --data-dir")
    return Path(_load(config, {}).node.data_dir)


def _query(config: Path | None, data_dir: Path | None) -> dict[str, Any]:
    from swarmnode.ops.control import ControlError, query_status

    try:
        return query_status(_data_dir(config, data_dir))
    except ControlError as err:
        raise _fail(str(err), code=1) from None


OptConfig = Annotated[Path | None, typer.Option("--config", "-c", help="Node YAML config file.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the raw JSON reply.")]


@app.command()
def status(config: OptConfig = None, data_dir: DataDirOpt = None, json_: JsonOpt = False) -> None:
    """Ask a running node: peers, messages in/out/rejected, ingestion, last round."""
    reply = _query(config, data_dir)
    from swarmnode.ops.report import format_status

    typer.echo(json.dumps(reply, indent=1) if json_ else format_status(reply))


@app.command()
def peers(config: OptConfig = None, data_dir: DataDirOpt = None, json_: JsonOpt = False) -> None:
    """Ask a running node for its peers (direct or relayed), reachability, mesh, scores."""
    reply = _query(config, data_dir)
    from swarmnode.ops.report import format_peers

    sw = reply.get("swarm") or {}
    view = {
        k: sw.get(k)
        for k in (
            "peer_id",
            "connected_peers",
            "mesh_size",
            "topic_peers",
            "peer_scores",
            "graylisted",
            "nat",
        )
    }
    typer.echo(json.dumps(view, indent=1) if json_ else format_peers(reply))


@app.command()
def keygen(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Where to write the key.")],
    psk: Annotated[
        bool, typer.Option("--psk", help="Write a private-swarm pre-shared key (swarm.key).")
    ] = False,
) -> None:
    """Make this node's identity key (kept if it exists), or a swarm PSK with --psk."""
    from swarmnode.errors import SwarmnodeError
    from swarmnode.ops.keys import keygen as make_keys

    try:
        typer.echo(make_keys(data_dir, psk=psk))
    except SwarmnodeError as err:
        raise _fail(err.one_line(), err.exit_code) from None


@app.command("id")
def id_(config: ConfigOpt, data_dir: DataDirOpt = None, set_: SetOpt = None) -> None:
    """Print this node's peer ID and listen multiaddrs (creates the identity if missing)."""
    cfg = _load(config, {"node.data_dir": data_dir and str(data_dir)}, set_)
    from swarmnode.errors import SwarmnodeError
    from swarmnode.ops.keys import node_id

    try:
        typer.echo(node_id(cfg))
    except SwarmnodeError as err:
        raise _fail(err.one_line(), err.exit_code) from None


def main() -> None:
    app()


if __name__ == "__main__":
    main()
