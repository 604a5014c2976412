"""The ``swarmnode`` command: thin, typed, and quick to answer ``--help``.

Invariants:
- Nothing heavy (torch, transformers, libp2p) is imported before arguments parse.
- A bad config or unusable model prints one line naming the field and exits 2;
  tracebacks are for bugs only.
"""

from __future__ import annotations

import logging
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


@app.callback()
def _root() -> None:
    """swarmnode: collective RL of language models over libp2p (SAPO)."""


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _load(config: Path, overrides: dict[str, Any]) -> Any:
    from swarmnode.config import ConfigError, load_config

    try:
        return load_config(config, {k: v for k, v in overrides.items() if v is not None})
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
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
) -> None:
    """Run a node: train on local tasks, and share with a swarm if configured."""
    cfg = _load(
        config, {"node.max_rounds": max_rounds, "node.data_dir": data_dir and str(data_dir)}
    )
    _logging(log_level)
    from swarmnode.model import ModelLoadError
    from swarmnode.node import run

    try:
        run(cfg)
    except ModelLoadError as err:
        raise _fail(str(err)) from None


def main() -> None:
    app()


if __name__ == "__main__":
    main()
