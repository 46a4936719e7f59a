"""What every handler shares, stored on the app under GATEWAY (no module globals)."""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from aiohttp import web

from spotreel.api.config import GatewayConfig
from spotreel.api.errors import ApiError
from spotreel.services.gateway.deps import Deps
from spotreel.services.gateway.loopwatch import LoopWatch
from spotreel.services.gateway.metrics import Metrics
from spotreel.config.settings import Settings

if TYPE_CHECKING:  # the public API's parts, made by app.py: the worker API never imports them
    from spotreel.services.gateway.public.admission import Admission
    from spotreel.services.gateway.public.pagetokens import PageTokens


@dataclass
class Gateway:
    settings: Settings
    cfg: GatewayConfig
    deps: Deps
    metrics: Metrics
    admission: Admission
    page_tokens: PageTokens
    # How far behind the gateway runs, and what it sheds while it is (loopwatch.py).
    watch: LoopWatch = field(default_factory=LoopWatch)
    # Command and request ids: 16 random hex digits drawn once per gateway, then a counter (32 hex digits in
    # all, like a uuid4's hex). Unique within the process by the counter, across processes by the prefix;
    # a uuid4 per id costs a getrandom call each, slow on a busy box.
    _id_prefix: str = field(default_factory=lambda: secrets.token_hex(8))
    _id_counter: itertools.count = field(default_factory=itertools.count)

    def new_id(self) -> str:
        return self.deps.new_id() if self.deps.new_id else f"{self._id_prefix}{next(self._id_counter):016x}"

    def shed(self, kind: str, threshold_s: float, what: str) -> None:
        """503 `overloaded` with Retry-After, before any work, when the gateway is `threshold_s` or more behind
        (loopwatch.py: its loop, its worker requests' age, the scheduler's verdicts); `kind` labels the
        admission-rejection metric, `what` names the request for its client."""
        retry = self.watch.shed(threshold_s)
        if retry is not None:
            self.metrics.rejections.labels(kind).inc()
            raise ApiError(503, "overloaded", f"the gateway is {self.watch.behind_ms / 1000:.1f} s behind and serves "
                           f"lease holders first; {what} again after {retry} s", retry_after=retry)


GATEWAY = web.AppKey("gateway", Gateway)


def gateway(request: web.Request) -> Gateway:
    # The worker API's sub-app holds it too (worker_api/routes.py, mount); config_dict (a chain of the apps, built on
    # every call) only for a sub-app that does not.
    gw = request.app.get(GATEWAY)
    return gw if gw is not None else request.config_dict[GATEWAY]
