"""The gateway with a vault: what it writes holds no personal text, what the tenant reads is opened, and
DELETE /v1/videos/{id} erases (data key, objects, claim text, EraseJob; 410 once projected erased)."""

from __future__ import annotations

import json
import os

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from spotreel.domain import commands as cmd
from spotreel.personal import envelope
from spotreel.personal.kek import LocalKek
from spotreel.personal.keystore import MemoryKeystore
from spotreel.personal.vault import Vault
from spotreel.services.gateway.app import create_app
from spotreel.config.settings import Settings
from tests.unit.gateway_fakes import fake_deps, with_status

pytestmark = pytest.mark.unit
A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}
PROMPT = "my neighbour's red bicycle at dawn"
BODY = {"prompt": PROMPT, "negative_prompt": "no people", "callback_url": "https://hooks.example.test/mine"}


@pytest_asyncio.fixture(loop_scope="function")
async def api():
    erased_objects: list[str] = []
    vault = Vault(MemoryKeystore(), LocalKek(os.urandom(32)), cache_seconds=0)
    deps = fake_deps(vault=vault, erase_objects=lambda job_id: erased_objects.append(job_id) or 3)
    client = TestClient(TestServer(create_app(Settings(webhook_allow_private=1), deps)))
    await client.start_server()
    yield client, deps, erased_objects
    await client.close()


def _no_plain_text(value: object) -> None:
    text = json.dumps(value, default=repr)
    for secret in (PROMPT, "no people", "hooks.example.test"):
        assert secret not in text


async def test_what_the_gateway_writes_is_sealed_and_what_the_tenant_reads_is_open(api):
    client, deps, _ = api
    r = await client.post("/v1/videos", json=BODY, headers={**A, "Idempotency-Key": "k1"})
    assert r.status == 202, await r.text()
    job_id = (await r.json())["job_id"]
    submit = deps.commands.sent[-1]
    assert isinstance(submit, cmd.SubmitJob)
    _no_plain_text(submit)
    _no_plain_text(deps.reads.claims[job_id])
    assert envelope.key_id_of(submit.spec.prompt) == job_id
    assert (submit.spec.model, submit.tenant, submit.priority) == ("tiny-t2v", "tenant-a", 0)  # readable without a key
    # The claim's view (not projected yet) and the projected row's are opened for the tenant.
    body = await (await client.get(f"/v1/videos/{job_id}", headers=A)).json()
    assert body["prompt"] == PROMPT and body["params"]["negative_prompt"] == "no people"
    claim = deps.reads.claims[job_id]
    with_status(deps, job_id, "queued", prompt=claim.prompt, params=claim.params)
    body = await (await client.get(f"/v1/videos/{job_id}", headers=A)).json()
    assert body["prompt"] == PROMPT and body["params"]["callback_url"] == BODY["callback_url"]
    listed = await (await client.get("/v1/videos", headers=A)).json()
    assert [v["prompt"] for v in listed["videos"]] == [PROMPT]
    # A retry with the same key is the same job and hash (sealed under the same key); another body is 409.
    again = await client.post("/v1/videos", json=BODY, headers={**A, "Idempotency-Key": "k1"})
    assert (await again.json())["replayed"] is True
    assert deps.commands.sent[-1].request_hash == submit.request_hash
    other = await client.post("/v1/videos", json={**BODY, "prompt": "x"}, headers={**A, "Idempotency-Key": "k1"})
    assert other.status == 409


async def test_the_request_hash_is_keyed_so_it_confirms_no_guess(api):
    from spotreel.domain import ids

    client, deps, _ = api
    await client.post("/v1/videos", json={"prompt": PROMPT}, headers={**A, "Idempotency-Key": "k2"})
    submit = deps.commands.sent[-1]
    from spotreel.api.submission import normalize
    from spotreel.api.config import GatewayConfig

    assert submit.request_hash != ids.request_hash(normalize({"prompt": PROMPT}, GatewayConfig()))


async def test_delete_erases_and_the_video_then_answers_410(api):
    client, deps, erased_objects = api
    job_id = (await (await client.post("/v1/videos", json=BODY, headers={**A, "Idempotency-Key": "k3"})).json())["job_id"]
    sealed = deps.commands.sent[-1].spec.prompt
    claim = deps.reads.claims[job_id]
    with_status(deps, job_id, "running", prompt=claim.prompt, params=claim.params)
    assert (await client.delete(f"/v1/videos/{job_id}", headers=B)).status == 404  # not B's
    r = await client.delete(f"/v1/videos/{job_id}", headers=A)
    assert r.status == 202, await r.text()
    answer = await r.json()
    assert answer["erased"] and answer["objects_deleted"] == 3 and erased_objects == [job_id]
    erase = deps.commands.sent[-1]
    assert isinstance(erase, cmd.EraseJob) and erase.by == "tenant:tenant-a" and erase.job_id == job_id
    _no_plain_text(erase)
    assert deps.vault.keystore.get(job_id) is None
    assert deps.reads.claims[job_id].prompt == ""
    # Nothing opens the sealed prompt any more: the view shows it gone.
    body = await (await client.get(f"/v1/videos/{job_id}", headers=A)).json()
    assert body["prompt"] is None and sealed not in json.dumps(body)
    # Once the projector marked it erased, it is 410, and erasing again is harmless.
    with_status(deps, job_id, "cancelled", erased_at_ms=deps.clock_ms())
    gone = await client.get(f"/v1/videos/{job_id}", headers=A)
    assert gone.status == 410 and (await gone.json())["error"]["code"] == "erased"
    assert (await client.delete(f"/v1/videos/{job_id}", headers=A)).status == 202


async def test_get_reports_when_the_video_expires_under_the_plan(api):
    from dataclasses import replace as dc_replace

    from spotreel.services.gateway.deps import Tenant

    client, deps, _ = api
    deps.auth.tenants["tenant-a"] = dc_replace(Tenant("tenant-a"), plan="free")
    for headers in (A, B):
        job_id = (await (await client.post("/v1/videos", json={"prompt": "x"}, headers={**headers, "Idempotency-Key": "k9"}))
                  .json())["job_id"]
        with_status(deps, job_id, "succeeded", updated_at_ms=86_400_000)
        body = await (await client.get(f"/v1/videos/{job_id}", headers=headers)).json()
        # A day, then the free plan's 7 days; tenant-b has no plan, which keeps videos.
        assert body["expires_at"] == ("1970-01-09T00:00:00.000Z" if headers is A else None)
