"""Print the config reference (every field, its type, default and meaning) as Markdown.

docs/config.md's table is this script's output; tests/test_readme.py keeps them equal.
Run: python scripts/config_reference.py [--write]  (--write updates docs/config.md in place)
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from swarmnode.config import Config
from swarmnode.lab import REPO


def _type(annotation: Any) -> str:
    text = str(annotation).replace("typing.", "")
    for noise in ("<class '", "'>", "swarmnode.config."):
        text = text.replace(noise, "")
    return text.replace("Literal", "one of ").replace("|", "or")


def _default(field: Any) -> str:
    if field.default is not PydanticUndefined:
        value = field.default
    elif field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return ""
        if isinstance(value, list) and value and isinstance(value[0], BaseModel):
            value = [v.model_dump() for v in value]
    else:
        return "required"
    return f"`{json.dumps(value)}`"


def rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += rows(annotation, f"{prefix}{name}.")
            continue
        desc = (field.description or "").replace("|", "\\|")
        out.append(f"| `{prefix}{name}` | {_type(annotation)} | {_default(field)} | {desc} |")
        (item,) = getattr(annotation, "__args__", (None,))[:1] or (None,)
        if isinstance(item, type) and issubclass(item, BaseModel):
            out += rows(item, f"{prefix}{name}[].")
    return out


def reference() -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|", *rows(Config)]
    return "\n".join(lines)


START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def splice(page: str) -> str:
    """The page's text with its reference section replaced by the current table."""
    head, _, rest = page.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{reference()}\n{END}{tail}"


def main() -> None:
    """``--write``: splice the table into docs/config.md; anything else: print it."""
    if sys.argv[1:] == ["--write"]:
        path = REPO / "docs" / "config.md"
        path.write_text(splice(path.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print(reference())


if __name__ == "__main__":
    main()
