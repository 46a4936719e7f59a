"""Helpers for the infra unit tests: an isolated home, cache and set of ports, so nothing touches the
shared stack that other tests use."""

from __future__ import annotations

import random
import socket
from dataclasses import fields
from pathlib import Path

import pytest

from spotreel.devstack.settings import DevstackSettings
from spotreel.config.settings import Settings

PORT_FIELDS = [f.name for f in fields(DevstackSettings) if f.name.endswith("_port")]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int) -> list[int]:
    """Ports that are free together with port+10000 (SeaweedFS puts its gRPC ports there)."""
    rng = random.Random()
    picked: list[int] = []
    while len(picked) < n:
        p = rng.randrange(21000, 30000)
        if p in picked or p + 10000 in picked:
            continue
        if _bindable(p) and _bindable(p + 10000):
            picked.append(p)
    return picked


def isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **overrides: object) -> dict[str, str]:
    """Point every SPOTREEL_* path and port at private values; returns the env that was set."""
    env = {"SPOTREEL_HOME": str(tmp_path / "home"), "SPOTREEL_CACHE_DIR": str(tmp_path / "cache")}
    for name, port in zip(PORT_FIELDS, free_ports(len(PORT_FIELDS))):
        env[f"SPOTREEL_{name.upper()}"] = str(port)
    for key, value in overrides.items():
        env[f"SPOTREEL_{key.upper()}"] = str(value)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def fake_jar_cache(settings: Settings) -> None:
    """A cache that looks fetched (marker + jars), so command lines can be built without Maven."""
    import json

    from spotreel.devstack.maven import bundles

    for bundle in bundles(settings):
        lib = bundle.lib(settings)
        lib.mkdir(parents=True, exist_ok=True)
        jars = ["jamm-0.4.0.jar", f"{bundle.name}-core.jar"]
        for jar in jars:
            (lib / jar).write_bytes(b"")
        bundle.marker(settings).write_text(json.dumps(
            {"bundle": bundle.name, "version": bundle.version, "coordinates": list(bundle.coordinates),
             "jars": jars}))


def isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> DevstackSettings:
    """The launcher's settings on an isolated home and ports, with a jar cache that looks fetched."""
    isolate(monkeypatch, tmp_path)
    s = DevstackSettings.from_env()
    fake_jar_cache(s)
    return s
