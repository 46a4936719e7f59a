"""The worker lease plane when the control plane falls behind, CI-sized: 150 simulated workers on 12 s leases
renewing for 25 s, through the real gateway (HTTP) or straight over Kafka (as internal pools do), against
private real services, while the scheduler, or the gateway the HTTP workers renew through, is frozen for
longer than a lease TTL. No machine vanishes in this run, so not a single lease may expire: overload is
latency, never a lost lease (DESIGN invariant 8), and every accepted job completes exactly once.

The peak itself (4,000 workers) is a benchmark: bench/README.md."""

from __future__ import annotations

import pytest

from spotreel.dispatch.asking import PRESENCE_S
from spotreel.fleetsim.config import SimConfig
from spotreel.services.simulator.run import simulate

pytestmark = [pytest.mark.integration, pytest.mark.serial, pytest.mark.timeout(420)]

LEASE_TTL_S = 12.0
STALL_S = 14.0  # longer than a lease TTL
# The freeze starts once the fleet holds leases (4 s: a second's cold start, then 6 submissions a second) and
# ends 3 s before the stage does, so recovery is seen too. A job of 6 one-second steps leased in the last
# seconds before the freeze renews into it, and its TTL deadline passes while the scheduler stands still;
# the whole test stays inside the suite's 60 s a test (tests/harness/suite_checks.py).
STALL_AT_S, STAGE_S, STEPS = 4.0, 21.0, 6
AT_LEAST = 60  # accepted of the 6 a second submitted over the stage


# Every refusal the gateway documents with a Retry-After (services/gateway/README.md): 429 `rate_limited`;
# 503 `overloaded`, `store_unavailable` and `kafka_unavailable` (a write in flight across a gateway frozen past
# the producer's 10 s message timeout is not acknowledged, and the client retries it).
DOCUMENTED_REFUSALS = {"overloaded", "rate_limited", "kafka_unavailable", "store_unavailable"}


def _every_submission_answered(report: dict, at_least: int) -> None:
    """Accepted, or refused with a documented code and Retry-After: the gateway sheds submissions while it
    runs 5 s behind (services/gateway/loopwatch.py), as it does those read late after a freeze; none is left
    without an answer. `at_least` accepted, so the lease plane had work to carry."""
    assert report["accepted"] >= at_least, report["submissions_refused"]
    # A refused client submits again after the Retry-After with the same key (fleet.py `_submit`), so a code
    # here may also have ended in a 202. gave_up: a client refused 5 times in a row stops
    # (SUBMIT_REFUSALS_MAX), each refusal an answer. no_answer (no HTTP answer at all) is never allowed.
    assert set(report["submissions_refused"]) <= DOCUMENTED_REFUSALS | {"gave_up"}, report["submissions_refused"]


def _every_job_once_and_no_lease_expired(report: dict) -> None:
    assert report["lost"] == 0 and report["duplicated"] == 0, report
    assert report["completed"] == report["accepted"], report
    assert report["vanished"] == 0
    assert report["lease_expired"] == 0, (report["lease_expired"], report["lease_expired_under_live_workers_timelines"])
    assert report["lease_expired_under_live_workers"] == 0, report["lease_expired_under_live_workers_timelines"]


@pytest.mark.parametrize("transport", ["http", "kafka"])
def test_a_frozen_scheduler_costs_no_live_worker_its_lease(stack, settings, tmp_path, transport):
    cfg = SimConfig(transport=transport, workers=(150,), stage_s=STAGE_S, drain_s=60.0, submit_rate=6.0,
                    steps=STEPS, step_s=1.0, checkpoint_cost_s=0.1, policy="fixed", fixed_interval_s=4.0, mtbf_s=0.0,
                    cold_start_s=1.0, heartbeat_s=4.0, progress_s=2.0, lease_ttl_s=LEASE_TTL_S, lease_wait_s=5.0,
                    stall_at_s=STALL_AT_S, stall_s=STALL_S, seed=11)
    lines: list[str] = []
    report = simulate(cfg, settings, tmp_path / "sim.json", partitions=3, say=lines.append)
    print("\n".join(lines))
    assert any("frozen" in line for line in lines), lines
    _every_submission_answered(report, at_least=AT_LEAST)
    # The point of the test: the scheduler was behind by more than a TTL, and no lease expired.
    _every_job_once_and_no_lease_expired(report)
    assert report["stages"][0]["workers"] == 150
    # While it was frozen, the verdicts (the gateway's answers, or the Kafka transport's own wait) told the
    # holders to space their renewals out.
    assert report["stages"][0]["statuses"].get("paced", 0) > 0, report["stages"][0]["statuses"]
    waits = report["stages"][0]["renewal_verdict_wait"]
    if transport == "kafka":
        # Answered within about a second of the send however long the scheduler stood still; the verdicts
        # themselves, followed after the answer, show the freeze.
        rtt = report["stages"][0]["heartbeat_rtt"]
        assert rtt["max_ms"] < 3000, rtt  # not a third of the TTL (4 s): the answer does not wait for the verdict
        assert waits["n"] > 0 and waits["max_ms"] > 3000, waits
    else:
        assert waits is None  # the gateway's histogram has them
    mix = report["command_records"]
    if transport == "http":
        # The gateway's renewal window: the renewals went in RenewalBatch records, several to a record.
        assert mix.get("RenewalBatch", 0) > 0 and mix["renewals_in_batches"] > 1.5 * mix["RenewalBatch"], mix
        alone = mix.get("RenewLease", 0) + mix.get("ReportProgress", 0)  # only a traced request's goes alone
        assert alone < 0.05 * mix["renewals_in_batches"], mix
        # And so did the idle workers' lease requests.
        assert mix.get("requests_in_batches", 0) > 0 and mix.get("RequestWork", 0) < 0.05 * mix["requests_in_batches"]
        # Their presence went in the gateway's pulses instead of a request each (idlepolls.py `vouch`): what
        # is left is about two requests a lease here, and more than twice that with the pulses vouching for
        # nobody (every idle worker asking its own partition every 7.5 s): the bound tells the two apart.
        requests = mix["requests_in_batches"] + mix.get("RequestWork", 0)
        assert mix.get("idle_in_pulses", 0) > 0, mix
        assert requests <= 4 * report["leases"], (requests, report["leases"], mix)
    else:  # workers on the Kafka transport produce their own renewals and requests, one record each
        assert "RenewalBatch" not in mix and mix.get("RenewLease", 0) + mix.get("ReportProgress", 0) > 0, mix
        assert mix.get("RequestWork", 0) > 0, mix
        # Each an independent asker, the idle workers ask with their share of the crowd (dispatch/asking.py
        # `crowd_asks`), not all of them at every stats change: what is left is every idle worker's presence
        # (its own partition every 7.5 s) and a few requests a lease; with every worker asking at every
        # change it is several times more, past the bound.
        presence = cfg.workers[0] * (report["elapsed_s"] / PRESENCE_S + 1)
        assert mix["RequestWork"] <= presence + 4 * report["leases"], (mix["RequestWork"], report["leases"])


def test_a_frozen_gateway_costs_no_live_worker_its_lease(stack, settings, tmp_path):
    """The HTTP workers' renewals wait in the frozen gateway's sockets for longer than a TTL. The scheduler,
    caught up and with its clock past their deadlines, holds the expiries until the gateway vouches again
    (GatewayPulse), and judges each renewal that waited at the time its worker sent it
    (services/scheduler/intake.py)."""
    cfg = SimConfig(transport="http", workers=(150,), stage_s=STAGE_S, drain_s=60.0, submit_rate=6.0, steps=STEPS,
                    step_s=1.0, checkpoint_cost_s=0.1, policy="fixed", fixed_interval_s=4.0, mtbf_s=0.0,
                    cold_start_s=1.0, heartbeat_s=4.0, progress_s=2.0, lease_ttl_s=LEASE_TTL_S, lease_wait_s=5.0,
                    stall_at_s=STALL_AT_S, stall_s=STALL_S, stall_target="gateway", seed=12)
    lines: list[str] = []
    report = simulate(cfg, settings, tmp_path / "sim.json", partitions=3, say=lines.append)
    print("\n".join(lines))
    assert any("gateway" in line and "frozen" in line for line in lines), lines
    _every_submission_answered(report, at_least=AT_LEAST)
    _every_job_once_and_no_lease_expired(report)

