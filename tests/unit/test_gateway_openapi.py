"""Every route the app serves is in the OpenAPI document, and every documented operation is served."""

from __future__ import annotations

from spotreel.services.gateway.app import create_app
from spotreel.services.gateway.openapi import document
from spotreel.settings import Settings
from tests.unit.gateway_fakes import fake_deps


def _served() -> set[tuple[str, str]]:
    app = create_app(Settings(), fake_deps())
    out = set()
    for route in app.router.routes():
        if route.method in ("HEAD", "OPTIONS"):
            continue
        out.add((route.method.lower(), route.resource.canonical))
    return out


def test_router_and_document_agree():
    doc = document()
    documented = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    assert _served() == documented


def test_document_shape():
    doc = document()
    assert doc["openapi"].startswith("3.")
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["responses"], (method, path)
            if "{id}" in path:
                assert any(p["name"] == "id" for p in op["parameters"]), (method, path)
