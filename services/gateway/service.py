"""Entrypoint wiring: settings → real deps → app → 127.0.0.1:port until SIGTERM/SIGINT, and the metrics on
127.0.0.1:metrics_port (internal, never the public port) when one is given."""

from __future__ import annotations

import logging

from aiohttp import web

from spotreel import tracing
from spotreel.services.gateway.app import create_app, serve_metrics
from spotreel.api.config import GatewayConfig, from_env as gateway_config
from spotreel.services.gateway.wiring import real_deps
from spotreel.settings import Settings


def serve(settings: Settings, port: int | None = None, metrics_port: int = 0,
          config: GatewayConfig | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s gateway %(levelname)s %(message)s")
    tracing.setup("gateway")
    with real_deps(settings) as deps:
        app = create_app(settings, deps, config or gateway_config())
        if metrics_port:
            serve_metrics(app, settings.host, metrics_port)
        # Bound to settings.host (127.0.0.1 by default) only, never 0.0.0.0.
        web.run_app(app, host=settings.host, port=port or settings.gateway_port,
                    print=lambda *a: logging.getLogger("spotreel.gateway").info(*a))
    return 0
