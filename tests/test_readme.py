"""The docs stay true to the code: the config reference and the README's commands."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _reference_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "config_reference", REPO / "scripts" / "config_reference.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_config_reference_is_current() -> None:
    page = (REPO / "docs" / "config.md").read_text(encoding="utf-8")
    assert _reference_module().splice(page) == page, (
        "docs/config.md is stale: run python scripts/config_reference.py --write"
    )


def test_ci_runs_the_readme_test_command() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    command = next(line for line in ci.splitlines() if line.startswith("bash scripts/setup.sh"))
    assert command in readme
