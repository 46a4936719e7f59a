"""What makes every knob of a spotreel process settable from the environment and listable in one place.

Two kinds of knob: the fields of a settings dataclass (Settings, GatewayConfig, the projector's, webhook
notifier's and janitor's tuning), each described by the comment above it and read by `dataclass_overrides`, and the options of a service's command line (`spotreel scheduler --metrics-port`), each
described by its help. A command's options become variables when its registrar calls `from_environment`:
`--metrics-port` of `spotreel projector` is SPOTREEL_PROJECTOR_METRICS_PORT, and the entrypoint applies them
(`apply`) as the options' defaults, so a flag given on the command line still wins. Options that are
operations rather than settings (`--rebuild`, `--truncate`) and options that repeat a Settings variable are
left out by name. spotreel.docs.settings writes all of them to docs/SETTINGS.md.
"""

from __future__ import annotations

import argparse
import inspect
import re
import shlex
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

# Where a registrar's choice of prefix and exclusions is kept on its parser.
_MARK = "_spotreel_env"
_FIELD = re.compile(r"^    (\w+)\s*:[^=]*(?:=\s*(.*))?$")
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


def field_comments(cls: type) -> dict[str, str]:
    """Each field of a dataclass with the comment lines right above it (or at the end of its line), joined:
    the field's description. A field under another field's comment, with no comment of its own, gets none."""
    found: dict[str, str] = {}
    pending: list[str] = []
    for line in textwrap.dedent(inspect.getsource(cls)).splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        m = _FIELD.match(line)
        if m and not stripped.startswith(("def ", "@")):
            tail = m.group(2) or ""
            inline = tail.split("  # ", 1)[1].strip() if "  # " in tail else ""
            found[m.group(1)] = " ".join(pending + ([inline] if inline else [])).strip()
        pending = []
    return found


def dataclass_overrides(cls: type, prefix: str, env: Mapping[str, str], skip: frozenset[str] = frozenset()
                        ) -> dict[str, Any]:
    """The fields of dataclass `cls` (but those in `skip`: wiring, or knobs another variable already sets)
    whose variable `prefix` + NAME is set in `env`, each parsed to the field's type (int, float, str, bool).
    A value that is not of that type is refused with the variable's name, so a typo stops a process at start
    instead of running it with other limits. For `dataclasses.replace(config, **overrides)`."""
    kinds: dict[str, Any] = {"int": int, "float": float, "str": str}
    changes: dict[str, Any] = {}
    for f in fields(cls):
        name = prefix + f.name.upper()
        raw = env.get(name)
        if raw is None or f.name in skip:
            continue
        if f.type == "bool":
            if raw.strip().lower() not in _TRUE | _FALSE:
                raise ValueError(f"{name} must be 1 or 0, got {raw!r}")
            changes[f.name] = raw.strip().lower() in _TRUE
            continue
        kind = kinds.get(str(f.type))
        if kind is None:
            raise TypeError(f"{cls.__name__}.{f.name} ({f.type}) cannot be set from the environment: skip it")
        try:
            changes[f.name] = kind(raw)
        except ValueError:
            raise ValueError(f"{name} must be {'an integer' if kind is int else 'a number'}, got {raw!r}") from None
    return changes


def from_environment(parser: argparse.ArgumentParser, prefix: str, skip: tuple[str, ...] = ()) -> None:
    """Make every option of `parser` but those named in `skip` (by dest) settable as `prefix` + its name."""
    setattr(parser, _MARK, (prefix, frozenset(skip)))


@dataclass(frozen=True)
class Option:
    """One command-line option that the environment can set."""

    command: str
    flag: str
    env: str
    action: argparse.Action


def env_options(parser: argparse.ArgumentParser, command: str = "") -> Iterator[Option]:
    """The options of every (sub)command of `parser` that `from_environment` opened to the environment."""
    mark = getattr(parser, _MARK, None)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if sub is not parser:
                    yield from env_options(sub, f"{command} {name}".strip())
        elif mark is not None and action.option_strings and action.dest not in mark[1] \
                and not isinstance(action, argparse._HelpAction):
            flag = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
            yield Option(command, flag, mark[0] + flag.lstrip("-").upper().replace("-", "_"), action)


def _value(option: Option, raw: str) -> Any:
    action = option.action
    if isinstance(action, argparse._StoreTrueAction):
        if raw.strip().lower() not in _TRUE | _FALSE:
            raise ValueError(f"{option.env} must be 1 or 0, got {raw!r}")
        return raw.strip().lower() in _TRUE
    kind = action.type or str
    many = isinstance(action, argparse._AppendAction) or action.nargs in ("+", "*")
    words = shlex.split(raw) if many else [raw]
    try:
        values = [kind(w) for w in words]
    except (TypeError, ValueError):
        what = {int: "an integer", float: "a number"}.get(kind, "a value of type " + getattr(kind, "__name__", "?"))
        raise ValueError(f"{option.env} must be {what}, got {raw!r}") from None
    if action.choices is not None and any(v not in action.choices for v in values):
        raise ValueError(f"{option.env} must be one of {', '.join(map(str, action.choices))}, got {raw!r}")
    return values if many else values[0]


class _AppendOverEnvironment(argparse._AppendAction):
    """A repeatable option whose default came from the environment: its first use on the command line
    replaces that list (argparse's own append would add to it)."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        if getattr(namespace, self.dest, None) is self.default:
            setattr(namespace, self.dest, None)
        super().__call__(parser, namespace, values, option_string)


def apply(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """Set the default of every option opened to the environment whose variable is set in `env`; a value
    that is not of the option's type (or not among its choices) is refused with the variable's name. A list
    (a repeatable option, or one of several values) is written as in a shell: `tiny-t2v@any wan@h100`."""
    for option in env_options(parser):
        raw = env.get(option.env)
        if raw is None:
            continue
        option.action.default = _value(option, raw)
        if type(option.action) is argparse._AppendAction:
            option.action.__class__ = _AppendOverEnvironment
