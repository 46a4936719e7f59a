"""GET /v1/usage against the in-memory fakes: the caller's own figures only, summed from the scheduler's
per-partition reports (usage.summarize), 503 without a usage source, and in the OpenAPI document."""

from __future__ import annotations

import pytest

from spotreel.domain import events as ev
from spotreel.services.gateway.openapi import document
from spotreel.services.gateway.public.usage import summarize
from tests.unit.gateway_fakes import fake_deps
from tests.unit.test_gateway_api import A, B, api  # noqa: F401  (api: the fixture)

pytestmark = pytest.mark.unit

HOUR = 3_600_000
REPORTS = {"tenant-a": [ev.TenantUsageReport("tenant-a", 0, HOUR, 100.0, 1, 60.0, 150.0, 12.5),
                        ev.TenantUsageReport("tenant-a", 3, 2 * HOUR, 40.0, 0, 0.0, 40.0)],
           "tenant-b": [ev.TenantUsageReport("tenant-b", 1, 2 * HOUR, 7.0, 0, 0.0, 7.0)]}


class FakeUsage:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def usage(self, tenant: str):
        self.asked.append(tenant)
        return summarize(tenant, REPORTS.get(tenant, []), 2 * HOUR, HOUR)


def test_summarize_sums_partitions_and_decays_to_now():
    got = summarize("tenant-a", REPORTS["tenant-a"], 2 * HOUR, HOUR)
    # 100 consumed an hour before now counts half; the held lease's estimate counts in full.
    assert got == {"tenant": "tenant-a", "used_gpu_seconds": 190.0, "wasted_gpu_seconds": 12.5,
                   "fair_share_gpu_seconds": 150.0, "leases_held": 1, "half_life_seconds": 3600, "as_of": 2 * HOUR}
    empty = summarize("nobody", [], 2 * HOUR, None)
    assert (empty["used_gpu_seconds"], empty["leases_held"], empty["as_of"], empty["half_life_seconds"]) == (
        0, 0, None, None)


async def test_a_tenant_sees_only_its_own_usage(api):  # noqa: F811
    deps = fake_deps(usage=FakeUsage())
    client, _ = await api(deps=deps)
    r = await client.get("/v1/usage", headers=A)
    assert r.status == 200
    assert (await r.json())["used_gpu_seconds"] == 190.0
    r = await client.get("/v1/usage", headers=B)
    assert (await r.json())["used_gpu_seconds"] == 7.0
    assert deps.usage.asked == ["tenant-a", "tenant-b"]
    assert (await client.get("/v1/usage")).status == 401


async def test_without_a_usage_source_it_is_503(api):  # noqa: F811
    client, _ = await api()
    r = await client.get("/v1/usage", headers=A)
    assert r.status == 503 and (await r.json())["error"]["code"] == "usage_unavailable"


def test_the_document_describes_it():
    from spotreel.api.config import GatewayConfig

    op = document(GatewayConfig())["paths"]["/v1/usage"]["get"]
    assert set(op["responses"]) >= {"200", "401", "503"}
