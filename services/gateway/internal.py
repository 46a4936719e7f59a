"""Seam for the worker API (`/internal/…`, DESIGN §3): lease long-poll, heartbeats, progress, checkpoints,
completion. Its shape depends on the scheduler's dispatch (RequestWork → assignments topic), so it comes
in the next round as a sub-app built here and mounted under /internal; the auth middleware already leaves
/internal/ to it (worker credentials: api_keys rows with kind = 'worker').
"""

from __future__ import annotations

from aiohttp import web

from spotreel.services.gateway.deps import Deps
from spotreel.settings import Settings


def build(settings: Settings, deps: Deps) -> web.Application | None:
    return None  # not built yet: no /internal routes exist, so the OpenAPI document lists none


def mount(app: web.Application, settings: Settings, deps: Deps) -> None:
    sub = build(settings, deps)
    if sub is not None:
        app.add_subapp("/internal/", sub)
