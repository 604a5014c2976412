"""The ``swarmnode`` command: thin, typed, and quick to answer ``--help``.

Invariants:
- Nothing heavy (torch, transformers, libp2p) is imported before arguments parse.
- ``status``/``peers`` only read the node's control socket (loopback, read-only);
  no node running there is one line and exit 1.
- Every ``SwarmnodeError`` prints one line and exits with its ``exit_code`` (2: a
  bad config field, key file or model, a data_dir in use; 1: the network side
  failed); tracebacks are for bugs only.
- ``start`` ends its process without interpreter finalization once the daemon has
  stopped (``_end_process``): nothing of the node is left for it to do, and what a
  library leaves running could abort the exit.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

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


def _end_process(code: int) -> NoReturn:
    """Exit a stopped daemon's process with ``code``: logs and streams flushed, then
    ``os._exit``, skipping interpreter finalization and C++ static destructors.

    By here the daemon has saved its checkpoint, closed its files and joined its
    threads, each with a timeout. Finalization would still run beside what a timeout
    abandoned and the libraries' own daemon threads (py-libp2p's cache sweeper,
    tokenizers, torch's pools): a thread that resumes inside torch with the GIL
    released after the interpreter is gone ends itself from a C++ ``noexcept``
    destructor and the whole process aborts, exit -6 with "terminate called without
    an active exception" (pytorch/pytorch#38228; seen twice in the slow suite,
    tests/test_cli.py makes it happen every time without this exit)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed: nothing can reach it
            stream.flush()
    os._exit(code)


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
        _fail(err.one_line(), err.exit_code)
        _end_process(err.exit_code)
    _end_process(0)


def _node_config(config: Path | None, data_dir: Path | None, sets: list[str] | None = None) -> Any:
    """The config of ``--config F`` or, alone, ``--data-dir D``'s config.resolved.yaml."""
    from swarmnode.errors import SwarmnodeError
    from swarmnode.ops.nodedir import node_config

    try:
        return node_config(config, data_dir, sets)
    except SwarmnodeError as err:
        raise _fail(err.one_line(), err.exit_code) from None


OptConfig = Annotated[Path | None, typer.Option("--config", "-c", help="Node YAML config file.")]
ReadDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", help="The node's data dir (alone: its config.resolved.yaml)."),
]
CheckpointOpt = Annotated[
    str | None, typer.Option("--checkpoint", help="round-N (default: the newest).")
]


@app.command("eval")
def eval_(
    config: OptConfig = None,
    data_dir: ReadDirOpt = None,
    set_: SetOpt = None,
    items: Annotated[int, typer.Option(help="Held-out items per dataset.", min=1)] = 50,
    base: Annotated[
        bool, typer.Option("--base", help="Score the untrained base too, side by side.")
    ] = False,
    save: Annotated[
        bool, typer.Option(help="Keep the result in <data_dir>/eval/ for the model card.")
    ] = True,
    json_: Annotated[bool, typer.Option("--json", help="Print the raw result.")] = False,
) -> None:
    """Score the newest checkpoint on held-out questions (a partition no node trains on)."""
    cfg = _node_config(config, data_dir, set_)
    _logging("warning")
    logging.getLogger("swarmnode.learn.progress").setLevel(logging.INFO)  # lines where no TTY
    from swarmnode.errors import SwarmnodeError
    from swarmnode.learn.evaluate import evaluate
    from swarmnode.ops.evalreport import compare, format_eval, save_eval

    try:
        result = evaluate(cfg, n=items)
        untrained = evaluate(cfg, n=items, base=True) if base else None
    except SwarmnodeError as err:
        raise _fail(err.one_line(), err.exit_code) from None
    paired = compare(result, untrained) if untrained is not None else None
    if save and result["round"] > 0:
        try:
            saved = save_eval(Path(cfg.node.data_dir), result, untrained, paired)
            typer.echo(f"saved {saved}", err=True)
        except OSError as err:
            typer.echo(f"warning: result not saved ({err})", err=True)
    if json_:
        both = {**result, "base_result": untrained, "paired": paired} if base else result
        typer.echo(json.dumps(both, indent=1))
        return
    for line in format_eval(result, untrained, paired):
        typer.echo(line)


@app.command("export")
def export_(
    out: Annotated[Path, typer.Option("--out", help="New folder for the model (must not exist).")],
    config: OptConfig = None,
    data_dir: ReadDirOpt = None,
    checkpoint: CheckpointOpt = None,
) -> None:
    """Write a checkpoint as a Hugging Face model folder (LoRA merged) with a model card."""
    cfg = _node_config(config, data_dir)
    _logging("warning")
    from swarmnode.errors import SwarmnodeError
    from swarmnode.ops.export import export

    try:
        done = export(cfg, out, checkpoint)
    except SwarmnodeError as err:
        raise _fail(err.one_line(), err.exit_code) from None
    how = "LoRA merged into the base" if done.lora else "full weights"
    typer.echo(
        f"exported round {done.round} ({how}, float32) to {done.out}: {len(done.files)} files"
    )


@app.command()
def ask(
    question: Annotated[
        str | None, typer.Argument(help="The question (default: read from stdin).")
    ] = None,
    config: OptConfig = None,
    data_dir: ReadDirOpt = None,
    model: Annotated[
        Path | None, typer.Option("--model", help="An export folder instead of a data dir.")
    ] = None,
    checkpoint: CheckpointOpt = None,
    item: Annotated[
        str | None, typer.Option("--item", help="Ask an item of this dataset; show its score.")
    ] = None,
    index: Annotated[int | None, typer.Option(help="The item's index (default: random).")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(min=1, help="Default: the node's.")] = None,
    temperature: Annotated[float, typer.Option(min=0.0, help="0: greedy.")] = 0.0,
) -> None:
    """Ask the node's newest checkpoint (or an export) one question; stream its answer."""
    if model is not None and (config is not None or data_dir is not None):
        raise _fail("give --model, or --config/--data-dir, not both")
    if item is not None and question is not None:
        raise _fail("give a question or --item, not both")
    cfg: Any = _node_config(config, data_dir) if model is None else None
    if item is None and question is None:
        if sys.stdin.isatty():
            typer.echo("(type the question, then Ctrl-D)", err=True)
        question = sys.stdin.read().strip()
        if not question:
            raise _fail("no question: give one as an argument, on stdin, or --item DATASET")
    _logging("warning")
    from swarmnode.errors import SwarmnodeError
    from swarmnode.ops import ask as asking

    try:
        if model is not None:
            ans = asking.from_export(model)
        else:
            ans = asking.from_data_dir(cfg, checkpoint)
        entry = None
        if item is not None:
            where = None if cfg is None else Path(cfg.node.data_dir)
            ref, entry = asking.draw_item(ans.cfg, item, index, where)
            question = str(entry["question"])
            typer.echo(f"[{item} item {ref.index}, held-out seed] {question}")
        typer.echo(f"({ans.label})", err=True)
        completion = asking.answer(ans, str(question), sys.stdout, max_new_tokens, temperature)
    except SwarmnodeError as err:
        raise _fail(err.one_line(), err.exit_code) from None
    if entry is not None:
        typer.echo(asking.verdict(completion, entry))


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
