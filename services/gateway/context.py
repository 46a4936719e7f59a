"""What every handler shares, stored on the app under GATEWAY (no module globals)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from aiohttp import web

from spotreel.services.gateway.admission import Admission
from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.deps import Deps
from spotreel.services.gateway.metrics import Metrics
from spotreel.services.gateway.pagetokens import PageTokens
from spotreel.settings import Settings


@dataclass
class Gateway:
    settings: Settings
    cfg: GatewayConfig
    deps: Deps
    metrics: Metrics
    admission: Admission
    page_tokens: PageTokens = field(default_factory=PageTokens)

    def new_id(self) -> str:
        return self.deps.new_id() if self.deps.new_id else uuid.uuid4().hex


GATEWAY = web.AppKey("gateway", Gateway)


def gateway(request: web.Request) -> Gateway:
    # The worker API's sub-app holds it too (internal.mount); config_dict (a chain of the apps, built on
    # every call) only for a sub-app that does not.
    gw = request.app.get(GATEWAY)
    return gw if gw is not None else request.config_dict[GATEWAY]
