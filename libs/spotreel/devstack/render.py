"""Config files come from templates/ with $placeholders, so they read like the files they produce."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from string import Template


def render(name: str, **values: object) -> str:
    text = resources.files("spotreel.devstack").joinpath("templates", name).read_text(encoding="utf-8")
    # substitute (not safe_substitute): a placeholder without a value is a bug, not a config line.
    return Template(text).substitute({k: str(v) for k, v in values.items()})


def write_if_changed(path: Path, text: str) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return True
