"""Entrypoint wiring: settings → real deps → app → 127.0.0.1:port until SIGTERM/SIGINT, and the metrics on
127.0.0.1:metrics_port (internal, never the public port) when one is given."""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.web_log import AccessLogger

from spotreel.runtime import eventloop
from spotreel.runtime import gctune
from spotreel.runtime import tracing
from spotreel.services.gateway.app import create_app, serve_metrics
from spotreel.api.config import GatewayConfig, from_env as gateway_config
from spotreel.services.gateway.wiring import real_deps
from spotreel.services.gateway.worker_api import routes as worker_api
from spotreel.config.settings import Settings


class AccessLog(AccessLogger):
    """aiohttp's access log without the worker API's successful requests: a fleet sends hundreds a second
    (a log line each is a visible share of the gateway's CPU at a few thousand workers); the metrics count them,
    and the worker API's errors are still logged."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        if response.status < 400 and request.path.startswith("/internal/"):
            return
        super().log(request, response, time)


def serve(settings: Settings, port: int | None = None, metrics_port: int = 0,
          config: GatewayConfig | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s gateway %(levelname)s %(message)s")
    tracing.setup("gateway")
    cfg = config or gateway_config()
    with real_deps(settings, renewal_batch_ms=cfg.renewal_batch_ms) as deps:
        app = create_app(settings, deps, cfg)
        worker_api.start_pulses(app, settings, deps, cfg.pulse_seconds)
        if metrics_port:
            serve_metrics(app, settings.host, metrics_port)
        gctune.install(settings.gc_threshold)
        # Bound to settings.host (127.0.0.1 by default) only, never 0.0.0.0.
        loop = eventloop.factory(settings.event_loop)()
        logging.getLogger("spotreel.gateway").info("event loop: %s", eventloop.name_of(loop))
        web.run_app(app, host=settings.host, port=port or settings.gateway_port,
                    access_log_class=AccessLog, loop=loop,
                    print=lambda *a: logging.getLogger("spotreel.gateway").info(*a))
    return 0
