"""The docs stay true to the code: the config reference, the README's commands, its
module map and its links."""

from __future__ import annotations

import re
from pathlib import Path

from swarmnode.lab.config_reference import splice

REPO = Path(__file__).resolve().parents[1]
MAP_START, MAP_END = "<!-- module-map:start -->", "<!-- module-map:end -->"


def _readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def test_config_reference_is_current() -> None:
    page = (REPO / "docs" / "config.md").read_text(encoding="utf-8")
    assert splice(page) == page, (
        "docs/config.md is stale: run python scripts/config_reference.py --write"
    )


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    command = next(line for line in ci.splitlines() if line.startswith("bash scripts/setup.sh"))
    assert command in _readme()


def module_map(readme: str) -> dict[str, set[str]]:
    """Package folder under swarmnode/ ('' for the top) -> the module files its bullet names.

    A bullet opens with the package in backticks (`swarmnode/learn/`); every
    backticked `name.py` after it is a module of that package.
    """
    block = readme.split(MAP_START, 1)[1].split(MAP_END, 1)[0]
    named: dict[str, set[str]] = {}
    for bullet in re.split(r"\n(?=- )", block.strip()):
        package, *rest = re.findall(r"`([^`]+)`", bullet)
        assert package.startswith("swarmnode/") and package.endswith("/"), bullet[:60]
        key = package.removeprefix("swarmnode/").rstrip("/")
        assert key not in named, f"two bullets for {package}"
        named[key] = {name for name in rest if name.endswith(".py")}
    return named


def unnamed_modules(readme: str, root: Path) -> list[str]:
    """The modules under root (a swarmnode/ tree) that the README's module map does not name."""
    named = module_map(readme)
    missing = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        package = path.parent.relative_to(root).as_posix().removeprefix(".")
        if path.name not in named.get(package, set()):
            missing.append(path.relative_to(root.parent).as_posix())
    return missing


def test_module_map_names_every_module() -> None:
    missing = unnamed_modules(_readme(), REPO / "swarmnode")
    assert not missing, f"README's module map (How it works) has no line for {missing}"


def test_module_map_names_only_modules_that_exist() -> None:
    gone = [
        f"swarmnode/{package}/{name}".replace("//", "/")
        for package, names in module_map(_readme()).items()
        for name in sorted(names)
        if not (REPO / "swarmnode" / package / name).is_file()
    ]
    assert not gone, f"README's module map names modules that do not exist: {gone}"


def test_a_module_without_a_line_is_found(tmp_path: Path) -> None:
    root = tmp_path / "swarmnode"
    (root / "learn").mkdir(parents=True)
    for name in ("cli.py", "learn/__init__.py", "learn/grpo.py", "learn/replay.py"):
        (root / name).write_text("", encoding="utf-8")
    readme = (
        f"{MAP_START}\n- `swarmnode/`: `cli.py` (the command)\n"
        f"- `swarmnode/learn/`, the learner: `grpo.py` (the update; not `replay`)\n{MAP_END}"
    )
    assert unnamed_modules(readme, root) == ["swarmnode/learn/replay.py"]


def test_links_resolve() -> None:
    for page in (REPO / "README.md", REPO / "docs" / "results.md"):
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
