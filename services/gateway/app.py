"""The gateway's app factory: settings + injected dependencies → an aiohttp Application.

Everything the handlers share lives in a `Gateway` object stored on the app (no module globals), so two
apps in one process (tests) never share caches, buckets or metrics.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from spotreel.runtime import tracing
from spotreel.services.gateway import openapi
from spotreel.services.gateway.public import guards, openai_routes, schedules, usage, videos
from spotreel.services.gateway.worker_api import routes as worker_api
from spotreel.services.gateway.public.admission import Admission
from spotreel.services.gateway.auth import KeyCache, make_middleware
from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.context import GATEWAY, Gateway
from spotreel.services.gateway.deps import Deps, SinkUnavailable, StoreUnavailable
from spotreel.api import openai_videos
from spotreel.api.errors import ApiError
from spotreel.services.gateway.loopwatch import LoopWatch
from spotreel.services.gateway.metrics import Metrics
from spotreel.services.gateway.public.pagetokens import PageTokens
from spotreel.config.settings import Settings

log = logging.getLogger("spotreel.gateway")


# Spellings the API served once and no longer does, with what to use instead (DELETE of a video, once a
# cancel, is now its erasure: public/erasure.py).
_REMOVED: tuple[tuple[re.Pattern[str], str, str], ...] = ()


def _not_allowed(request: web.Request, exc: web.HTTPMethodNotAllowed) -> ApiError:
    allowed = sorted(exc.allowed_methods)
    hint = next((said for path, method, said in _REMOVED
                 if exc.method == method and path.fullmatch(request.path)), "")
    return ApiError(405, "method_not_allowed", f"{exc.method} is not served here; allowed: {', '.join(allowed)}{hint}",
                    headers={"Allow": ", ".join(allowed)}, allowed=allowed)


def _answer(request: web.Request, exc: ApiError) -> web.Response:
    """The error in the shape of the surface asked: OpenAI's under /openai/, spotreel's everywhere else."""
    if not request.path.startswith("/openai/"):
        return exc.response()
    status, body = openai_videos.openai_error(exc)
    response = exc.response()  # for its headers (Retry-After, Allow)
    return web.json_response(body, status=status, headers={k: v for k, v in response.headers.items()
                                                            if k in ("Retry-After", "Allow")})


def _error_middleware(metrics: Metrics):
    @web.middleware
    async def errors(request: web.Request, handler):
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except ApiError as exc:
            answer = _answer(request, exc)
            status = answer.status
            return answer
        except SinkUnavailable as exc:
            metrics.rejections.labels("kafka_unavailable").inc()
            status = 503
            return _answer(request, ApiError(503, "kafka_unavailable", f"the command log did not acknowledge the write: {exc}",
                            retry_after=5))
        except StoreUnavailable as exc:
            status = 503
            return _answer(request, ApiError(503, "store_unavailable", f"the read model did not answer: {exc}",
                            retry_after=5))
        except web.HTTPRequestEntityTooLarge as exc:
            status = 413
            return _answer(request, ApiError(413, "body_too_large", exc.text or "request body too large"))
        except web.HTTPMethodNotAllowed as exc:
            status = 405
            return _answer(request, _not_allowed(request, exc))
        except web.HTTPException as exc:
            status = exc.status
            if exc.status < 400:
                raise
            code = {404: "not_found"}.get(exc.status, "http_error")
            return _answer(request, ApiError(exc.status, code, exc.reason))
        except ConnectionError:
            # The client went away mid-request (it gave up on a gateway far behind, whose loop reached the
            # request after the client's timeout): nobody to answer, and no traceback to format for each of
            # thousands of them when the gateway can least afford it. 499: nginx's "client closed request".
            status = 499
            return _answer(request, ApiError(499, "client_closed_request", "the client closed the connection"))
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            return _answer(request, ApiError(500, "internal_error", "unexpected error; it has been logged"))
        finally:
            route = request.match_info.route.resource
            name = route.canonical if route is not None else "unmatched"
            metrics.latency.labels(request.method, name, str(status)).observe(time.perf_counter() - started)

    return errors


def _trace_middleware():
    """A server span for a request that carries a sampled `traceparent` or that SPOTREEL_TRACE_SAMPLE picks
    (runtime/tracing.py); the commands produced inside it carry its context, and the answer names the trace
    (`traceparent` and `X-Trace-Id`). A request with neither is passed through untouched."""
    from opentelemetry import context as otel_context
    from opentelemetry.trace import SpanKind, set_span_in_context

    @web.middleware
    async def traced(request: web.Request, handler):
        given = request.headers.get(tracing.TRACEPARENT)
        if given is None and not tracing.samples_new_traces():
            return await handler(request)
        route = request.match_info.route.resource
        name = f"{request.method} {route.canonical if route is not None else 'unmatched'}"
        span = tracing.start_span(name, given, kind=SpanKind.SERVER,
                                  attributes={"http.request.method": request.method, "url.path": request.path})
        token = otel_context.attach(set_span_in_context(span))
        try:
            response = await handler(request)
            span.set_attribute("http.response.status_code", response.status)
            job_id = response.headers.get("Location", "").rpartition("/")[2]
            if job_id:
                span.set_attribute("spotreel.job_id", job_id)
            tp = tracing.traceparent_for(span)
            if tp is not None and not response.prepared:
                response.headers[tracing.TRACEPARENT] = tp
                response.headers[tracing.TRACE_ID_HEADER] = tp[3:35]
            return response
        finally:
            otel_context.detach(token)
            span.end()

    return traced


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def metrics_app(registry: CollectorRegistry) -> web.Application:
    """The internal metrics endpoint: GET /metrics of the gateway's registry, on a port of its own (never the
    public one: the public API needs a key for everything but /healthz and /openapi.json)."""

    async def view(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", view)
    return app


def serve_metrics(app: web.Application, host: str, port: int) -> None:
    """Serve the gateway app's metrics on host:port for as long as `app` runs (a second site on its loop)."""

    async def site(app: web.Application):
        runner = web.AppRunner(metrics_app(app[GATEWAY].metrics.registry))
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        yield
        await runner.cleanup()

    app.cleanup_ctx.append(site)


async def openapi_view(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    return web.json_response(openapi.document(gw.cfg, bool(gw.settings.webhook_allow_private)),
                             dumps=lambda o: json.dumps(o, indent=1))


def _watching(watch: LoopWatch):
    """The loop's lag measured while the app runs (loopwatch.py: what the gateway sheds when behind)."""
    async def ctx(_app: web.Application):
        task = asyncio.get_running_loop().create_task(watch.run())
        yield
        task.cancel()
    return ctx


def create_app(settings: Settings, deps: Deps, cfg: GatewayConfig | None = None) -> web.Application:
    cfg = cfg or GatewayConfig()
    if cfg.models is None and settings.model_registry:
        from dataclasses import replace

        from spotreel.model_registry import load

        cfg = replace(cfg, models=load(settings.model_registry))
    metrics = Metrics.create()
    if hasattr(deps.commands, "batches"):  # the real sender (wiring.py); tests' stand-ins have no window
        metrics.count_batches(deps.commands)
    admission = Admission(cfg, deps.reads, on_reject=lambda reason: metrics.rejections.labels(reason).inc(),
                          pools=deps.pools, usage=deps.usage, clock_ms=deps.clock_ms)
    app = web.Application(
        client_max_size=cfg.max_body_bytes,
        handler_args=guards.HANDLER_ARGS,
        # Sizes before auth (an oversized Authorization is never looked up), content type after it (an
        # anonymous caller learns nothing but 401).
        middlewares=[_trace_middleware(), _error_middleware(metrics), guards.sizes,
                     make_middleware(KeyCache(deps.auth, cfg.auth_cache_seconds)), guards.json_bodies],
    )
    watch = LoopWatch(on_measure=metrics.behind.set)
    app[GATEWAY] = Gateway(settings, cfg, deps, metrics, admission, PageTokens(settings.gateway_token_key), watch)
    app.cleanup_ctx.append(_watching(watch))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/openapi.json", openapi_view)
    videos.add_routes(app.router)
    schedules.add_routes(app.router)
    usage.add_routes(app.router)
    openai_routes.add_routes(app.router)
    worker_api.mount(app, settings, deps, cfg, metrics)
    return app
