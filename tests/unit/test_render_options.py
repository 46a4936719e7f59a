"""A job's own render options (`guidance_scale`, `negative_prompt`, `sampler`) on their way from the request to
the worker's render: the gateway's checks (422 naming the field and the allowed values, the sampler against
the model family's in the registry), the request hash of a body without them unchanged, the SubmitJob and
JobSubmitted carrying them, the lease answer (WorkAssigned, over HTTP as JSON and over Kafka as the record)
handing them to the worker, the worker preferring them over its own settings for the model, and a schedule's
job template taking them (and timeout_seconds) under the same checks into each occurrence's job."""

from __future__ import annotations


import pytest

from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.domain import ids
from spotreel.domain.decide import decide
from spotreel.domain.spec import flattened
from spotreel.model_registry import parse
from spotreel.api.config import GatewayConfig
from spotreel.api.errors import ApiError
from spotreel.api.submission import build_submit, normalize
from spotreel.services.scheduler.handler import work_assigned
from spotreel.worker.transport import WorkerLease
from tests.unit.jobkit import leased_job, submit
from tests.unit.test_gateway_api import BODY, A, api, post  # noqa: F401  (api: the fixture)

pytestmark = pytest.mark.unit

REGISTRY = parse({"models": {
    "tiny-t2v": {"directory": "/m/tiny", "family": "unet3d", "sizes": {"multiple": 8, "min": 16, "max": 512},
                 "frames": {"max": 64}, "steps": {"max": 50}},
    "wan-1_3b": {"directory": "/m/wan", "family": "wan", "sizes": ["832x480"], "frames": {"min": 5, "max": 81,
                                                                                          "step": 4},
                 "steps": {"max": 50}}}})
OPTIONS = {"guidance_scale": 4.5, "negative_prompt": "blurry, text", "sampler": "dpmpp"}


def test_a_body_without_options_hashes_as_before_and_null_means_the_default():
    cfg = GatewayConfig()
    plain = normalize(dict(BODY), cfg)
    assert not set(OPTIONS) & set(plain)
    spelled = normalize({**BODY, "guidance_scale": None, "negative_prompt": None, "sampler": None}, cfg)
    assert ids.request_hash(spelled) == ids.request_hash(plain)
    given = normalize({**BODY, **OPTIONS}, cfg)
    assert {k: given[k] for k in OPTIONS} == OPTIONS and ids.request_hash(given) != ids.request_hash(plain)
    s = build_submit("acme", "k1", given, 0, "c1")
    assert (s.spec.guidance_scale, s.spec.negative_prompt, s.spec.sampler) == (4.5, "blurry, text", "dpmpp")
    assert build_submit("acme", "k2", plain, 0, "c2").spec.guidance_scale is None


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"guidance_scale": 0.5}, "guidance_scale", "from 1 (no guidance) to 50"),
    ({"guidance_scale": True}, "guidance_scale", "must be a number"),
    ({"guidance_scale": 10**400}, "guidance_scale", "to 50"),
    ({"negative_prompt": 3}, "negative_prompt", "must be a string"),
    ({"negative_prompt": "a\x00b"}, "negative_prompt", "NUL"),
    ({"sampler": "lms"}, "sampler", "['ddim', 'euler_a', 'unipc', 'dpmpp', 'flow_euler']"),
    # With the registry: the model family's samplers only, named in the answer.
    ({"sampler": "flow_euler"}, "sampler", "(unet3d family) takes samplers ddim, euler_a, unipc, dpmpp"),
    ({"model": "wan-1_3b", "resolution": "832x480", "duration": 33 / 16, "fps": 16, "sampler": "ddim"}, "sampler",
     "(wan family) takes samplers unipc, dpmpp"),
])
def test_bad_options_are_refused_naming_the_field_and_what_is_allowed(change, field, words):
    with pytest.raises(ApiError) as info:
        normalize({**BODY, **change}, GatewayConfig(models=REGISTRY))
    assert (info.value.status, info.value.field) == (422, field) and words in str(info.value), info.value


async def test_the_gateway_answers_422_for_a_sampler_of_another_family_and_sends_the_options(api):  # noqa: F811
    client, deps = await api(GatewayConfig(models=REGISTRY))
    r = await post(client, {**BODY, "resolution": "32x32", "sampler": "flow_euler"})
    assert r.status == 422 and (await r.json())["error"]["field"] == "sampler"
    r = await post(client, {**BODY, "resolution": "32x32", **OPTIONS}, key="k2")
    assert r.status == 202, await r.text()
    [sent] = deps.commands.sent
    assert (sent.spec.guidance_scale, sent.spec.negative_prompt, sent.spec.sampler) == (4.5, "blurry, text", "dpmpp")


def test_the_options_go_from_submit_through_the_events_to_the_lease_answer():
    d = leased_job(**OPTIONS)
    submitted = d.history[0]
    assert isinstance(submitted, ev.JobSubmitted)
    assert (submitted.spec.guidance_scale, submitted.spec.negative_prompt, submitted.spec.sampler) == (4.5, "blurry, text", "dpmpp")
    leased = next(e for e in d.history if isinstance(e, ev.JobLeased))
    answer = work_assigned("rw:1", leased, d.s, 0)
    codec = Codec.default()
    over_kafka = codec.decode_message(codec.encode_message(answer))
    for lease in (WorkerLease.from_answer(flattened(answer)), WorkerLease.from_answer(over_kafka)):  # HTTP JSON, Kafka record
        assert (lease.spec.guidance_scale, lease.spec.negative_prompt, lease.spec.sampler) == (4.5, "blurry, text", "dpmpp")
        assert lease.spec == answer.spec
    plain = work_assigned("rw:2", leased, leased_job().s, 0)
    assert WorkerLease.from_answer(flattened(plain)).spec.sampler is None


@pytest.mark.parametrize(("change", "words"), [
    ({"guidance_scale": 0.0}, "guidance_scale must be null or between 1 and 50"),
    ({"guidance_scale": float("nan")}, "guidance_scale"),
    ({"sampler": "dpm++ 2m"}, "sampler must be null or a sampler name"),
    ({"negative_prompt": "\x00"}, "negative_prompt must not contain NUL"),
])
def test_a_submit_job_over_kafka_beyond_the_limits_is_refused(change, words):
    [rejected] = decide(None, submit(**change), 1_000)
    assert isinstance(rejected, ev.CommandRejected) and rejected.reason == "invalid_request"
    assert words in rejected.detail


def test_the_read_model_shows_the_options_a_job_set_and_nothing_for_one_that_set_none():
    import json

    from spotreel.services.projector.job_rows import params_json

    assert {k: v for k, v in json.loads(params_json(leased_job(**OPTIONS).s)).items() if k in OPTIONS} == OPTIONS
    assert not set(OPTIONS) & set(json.loads(params_json(leased_job().s)))


def test_the_local_registry_takes_the_demo_and_the_readme_requests(tmp_path):
    """`make demo` (32x32, 8 frames, 20 steps) and README's first submissions pass the local stack's registry."""
    import tomllib

    from spotreel.demo.request import DEFAULT_FPS, DEFAULT_FRAMES, DEFAULT_RESOLUTION, DEFAULT_STEPS
    from spotreel.platform.seed import local_registry_text

    local = parse(tomllib.loads(local_registry_text(tmp_path)))
    assert local.problem(model="tiny-t2v", resolution=DEFAULT_RESOLUTION, duration_s=DEFAULT_FRAMES / DEFAULT_FPS,
                         fps=DEFAULT_FPS, num_steps=DEFAULT_STEPS) is None
    for change in ({}, {"resolution": "32x32", "duration": 0.5}, {"num_steps": 20, "seed": 7}):
        body = normalize({"prompt": "a red fox in snow", **change}, GatewayConfig(models=local))
        assert body["model"] == "tiny-t2v"


async def test_a_schedules_job_carries_the_options_into_its_create_schedule_and_get(api):  # noqa: F811
    client, deps = await api(GatewayConfig(models=REGISTRY))
    body = {"cron": "0 * * * *", "job": {"prompt": "p", "resolution": "32x32", "timeout_seconds": 600, **OPTIONS}}
    r = await client.post("/v1/schedules", json=body, headers={**A, "Idempotency-Key": "s-options"})
    assert r.status == 202, await r.text()
    [sent] = deps.commands.sent
    assert (sent.spec.guidance_scale, sent.spec.negative_prompt, sent.spec.sampler, sent.timeout_ms) == \
        (4.5, "blurry, text", "dpmpp", 600_000)
    got = await (await client.get(f"/v1/schedules/{sent.schedule_id}", headers=A)).json()  # from the claim
    assert {k: got["job"][k] for k in OPTIONS} == OPTIONS and got["job"]["timeout_seconds"] == 600


async def test_a_schedule_without_options_sends_none_and_shows_nulls(api):  # noqa: F811
    client, deps = await api()
    r = await client.post("/v1/schedules", json={"cron": "0 * * * *", "job": {"prompt": "p"}},
                          headers={**A, "Idempotency-Key": "s-plain"})
    assert r.status == 202, await r.text()
    [sent] = deps.commands.sent
    assert (sent.spec.guidance_scale, sent.spec.negative_prompt, sent.spec.sampler, sent.timeout_ms) == (None,) * 4
    got = await (await client.get(f"/v1/schedules/{sent.schedule_id}", headers=A)).json()
    assert {k: got["job"][k] for k in (*OPTIONS, "timeout_seconds")} == dict.fromkeys((*OPTIONS, "timeout_seconds"))


# The very refusals of POST /v1/videos (same function), the field named job.<field>.
@pytest.mark.parametrize(("change", "field", "words"), [
    ({"guidance_scale": 0.5}, "job.guidance_scale", "from 1 (no guidance) to 50"),
    ({"negative_prompt": 3}, "job.negative_prompt", "must be a string"),
    ({"sampler": "lms"}, "job.sampler", "['ddim', 'euler_a', 'unipc', 'dpmpp', 'flow_euler']"),
    ({"sampler": "flow_euler"}, "job.sampler", "(unet3d family) takes samplers ddim, euler_a, unipc, dpmpp"),
    ({"timeout_seconds": 0}, "job.timeout_seconds", "must be between"),
])
async def test_a_schedules_job_refuses_what_a_video_refuses(api, change, field, words):  # noqa: F811
    client, deps = await api(GatewayConfig(models=REGISTRY))
    body = {"cron": "0 * * * *", "job": {"prompt": "p", "resolution": "32x32", **change}}
    r = await client.post("/v1/schedules", json=body, headers={**A, "Idempotency-Key": "s-bad"})
    error = (await r.json())["error"]
    assert r.status == 422 and error["field"] == field and words in error["message"], error
    assert deps.commands.sent == []


async def test_a_schedules_job_still_refuses_webhook_events(api):  # noqa: F811
    client, deps = await api()
    body = {"cron": "0 * * * *", "job": {"prompt": "p", "callback_url": "https://example.com/h",
                                        "webhook_events": ["started"]}}
    r = await client.post("/v1/schedules", json=body, headers={**A, "Idempotency-Key": "s-events"})
    assert r.status == 422 and (await r.json())["error"]["field"] == "job.webhook_events"
    assert deps.commands.sent == []


def test_the_schedule_projection_keeps_the_options_a_template_set_and_omits_unset_ones():
    import json

    from spotreel.domain.schedules import decide_schedule
    from spotreel.services.gateway.public.schedules import schedule_json
    from spotreel.readmodel.schedules import ScheduleView
    from spotreel.services.projector.schedule_rows import template_json
    from tests.unit.test_job_schedules import create

    with_options, plain = (decide_schedule(None, create(**o), 0)[0] for o in ({**OPTIONS, "timeout_ms": 60_000}, {}))
    assert {k: json.loads(template_json(with_options))[k] for k in OPTIONS} == OPTIONS
    assert not {*OPTIONS, "timeout_ms"} & set(json.loads(template_json(plain)))
    assert json.loads(template_json(with_options))["timeout_ms"] == 60_000

    def shown(created):  # GET /v1/schedules/{id} of the projected row
        view = ScheduleView(created.schedule_id, "acme", "active", "0 * * * *", "UTC", "skip", 60_000, 100, "allow",
                            json.loads(template_json(created)), 0, 0, None, None, 2)
        return schedule_json(view)["job"]

    assert {k: shown(with_options)[k] for k in OPTIONS} == OPTIONS and shown(with_options)["timeout_seconds"] == 60
    assert {k: shown(plain)[k] for k in (*OPTIONS, "timeout_seconds")} == dict.fromkeys((*OPTIONS, "timeout_seconds"))
