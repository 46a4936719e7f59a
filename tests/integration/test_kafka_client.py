"""spotreel.client.kafka against the real scheduler process and Kafka: an internal producer submits and
controls jobs without the gateway and reads each command's verdict from the events topic, refusals included
(a command on a job that does not exist, version 0, must be visible to its producer too)."""

from __future__ import annotations

import uuid

import pytest

from spotreel.client.kafka import KafkaJobClient
from spotreel.domain import events as ev
from spotreel.domain import ids
from tests.integration.schedkit import SchedulerProc, drop_topics, make_topics, scheduler_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
BODY = {"prompt": "a red fox in snow", "model": "tiny-t2v", "gpu_type": "cpu", "resolution": "64x64"}


@pytest.fixture
def client(stack, tmp_path):
    settings = scheduler_settings("kc" + uuid.uuid4().hex[:10], partitions=2)
    make_topics(settings)
    proc = SchedulerProc(settings, tmp_path)
    try:
        proc.wait_owning({0, 1})
        with KafkaJobClient(settings) as kc:
            yield kc
    except BaseException:
        print(f"----- tail of {proc.log_path.name} -----\n{proc.log()[-4000:]}")
        raise
    finally:
        proc.stop()
        drop_topics(settings)


def test_submit_and_control_over_kafka_with_visible_verdicts(client) -> None:
    sent = client.submit("acme", "order-1", BODY)
    assert sent.job_id == ids.job_id_for("acme", "order-1")
    verdict = client.verdict(sent)
    assert verdict.state == "accepted" and isinstance(verdict.event, ev.JobSubmitted)
    assert verdict.event.request_hash == sent.request_hash

    # The same request again changes nothing and writes nothing; another body under the key is refused.
    assert client.verdict(client.submit("acme", "order-1", BODY), timeout_s=2).state == "pending"
    reused = client.verdict(client.submit("acme", "order-1", {**BODY, "prompt": "a blue fox"}))
    assert (reused.state, reused.reason) == ("rejected", "idempotency_key_reused")

    assert client.verdict(client.set_priority(sent.job_id, 7)).state == "accepted"
    cancelled = client.verdict(client.cancel(sent.job_id))
    assert cancelled.state == "accepted" and isinstance(cancelled.event, ev.JobCancelled)
    assert client.verdict(client.retry(sent.job_id)).state == "rejected"  # only failed/dead-lettered jobs

    nobody = client.verdict(client.pause(ids.job_id_for("acme", "never-submitted")))
    assert (nobody.state, nobody.reason) == ("rejected", "unknown_job")
    assert nobody.event.version == 0
