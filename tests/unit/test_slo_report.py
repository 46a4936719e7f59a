"""The SLO report (services/simulator/slo.py) on event histories made by the real decide/evolve."""

from __future__ import annotations

import pytest

from spotreel.services.simulator.slo import ack_verdict, measure, render_text, report
from spotreel.services.simulator.slo_cli import ack_from_prometheus, ack_window, counter_increase, histogram_quantile
from tests.unit.jobkit import Driver


def _job(key: str, priority: int, lease_after_ms: int, *, preempt: str | None = None, recover_ms: int = 0,
         complete_after_ms: int | None = 10_000, at: int = 0) -> list:
    d = Driver()
    d.now += at
    d.submit(key=key, priority=priority)
    d.now += lease_after_ms
    d.grant()
    if preempt == "vanish":
        d.expire()  # TTL later: LeaseExpired + JobRequeued
        d.now += recover_ms
        d.grant(worker="w2")
    elif preempt == "notice":
        d.release(reason="preempted")
        d.now += recover_ms
        d.grant(worker="w2")
    elif preempt == "unclaimed":
        d.release(reason="unclaimed")
        d.now += recover_ms
        d.grant(worker="w2")
    if complete_after_ms is not None:
        d.now += complete_after_ms
        d.complete()
    return d.history


def test_pickup_and_completion_per_tier_from_the_first_lease() -> None:
    events = (_job("a", 9, 200) + _job("b", 9, 400) + _job("c", 0, 45_000, complete_after_ms=None)
              + _job("d", 0, 1_000, preempt="vanish", recover_ms=5_000))
    m = measure(events)
    assert sorted(m["pickup"][9]) == [0.2, 0.4]
    assert sorted(m["pickup"][0]) == [1.0, 45.0]  # d's lease after its preemption is not a second pickup
    assert sorted(m["completion"][9]) == [10.2, 10.4]
    assert m["completion"][0] == [1.0 + 30.0 + 5.0 + 10.0]  # c never finished
    assert m["p0"] == m["pickup"][9]


def test_recovery_counts_preemptions_only() -> None:
    events = (_job("v", 5, 0, preempt="vanish", recover_ms=4_000)
              + _job("n", 5, 0, preempt="notice", recover_ms=70_000)
              + _job("u", 5, 0, preempt="unclaimed", recover_ms=1_000))
    assert sorted(measure(events)["recovery"]) == [4.0, 70.0]


def test_report_judges_each_target_and_says_no_data_rather_than_met() -> None:
    events = (_job("a", 9, 200) + _job("b", 9, 300) + _job("c", 0, 45_000)
              + _job("d", 0, 0, preempt="notice", recover_ms=70_000))
    rep = report(events)
    slos = rep["slos"]
    assert slos["pickup"]["9"]["status"] == "met" and slos["pickup"]["0"]["status"] == "missed"
    assert slos["pickup"]["0"]["value_s"] == 45.0
    assert slos["p0_start_p50"]["status"] == "met" and slos["p0_start_p50"]["value_s"] == 0.2
    assert slos["recovery"]["status"] == "missed" and slos["recovery"]["value_s"] == 70.0
    assert slos["completion"]["9"]["status"] == "met"
    assert slos["ack"]["status"] == "not measured"
    assert report(events, {"p50": 0.01, "p99": 0.2})["slos"]["ack"]["status"] == "missed"
    empty = report(_job("x", 3, 100))
    assert empty["slos"]["recovery"]["status"] == "no data"
    assert empty["slos"]["p0_start_p99"]["status"] == "no data"
    text = render_text(rep)
    assert "pickup" in text and "45.0 s" in text and "200 ms" in text and "not measured" in text


def test_a_submission_window_keeps_only_the_jobs_submitted_in_it_with_their_whole_lives() -> None:
    """One stage of a ramp: jobs submitted in [from, to) count, with a completion that lands after `to`."""
    early = _job("early", 5, 100, at=0)
    inside = _job("inside", 5, 2_000, at=60_000, complete_after_ms=20_000)
    late = _job("late", 5, 300, at=130_000)
    start = next(e.at_ms for e in inside if type(e).__name__ == "JobSubmitted")
    m = measure(early + inside + late, submitted=(start, start + 10_000))
    assert m["pickup"] == {5: [2.0]} and m["completion"] == {5: [22.0]}  # done 12 s after the window closed
    assert report(early + inside + late, submitted=(start, start + 1))["slos"]["pickup"]["5"]["n"] == 1
    assert measure(early + inside + late, submitted=(0, 1))["pickup"] == {}


def test_the_ack_row_has_a_figure_only_when_prometheus_gave_one_and_says_why_not_otherwise() -> None:
    assert ack_verdict(None)["status"] == "not measured" and ack_verdict(None)["value_s"] is None
    down = ack_verdict({"error": "Prometheus at http://x did not answer the ack query: refused"})
    assert down == {**down, "status": "not measured", "value_s": None, "note": down["note"]}
    assert "refused" in down["note"]
    quiet = ack_verdict({"n": None, "p50": None, "p99": None, "note": "no 202 to POST /v1/videos in the window"})
    assert quiet["status"] == "no data" and quiet["value_s"] is None and "no 202" in quiet["note"]
    assert ack_verdict({"n": 0.0, "p50": 0.01, "p99": 0.02})["status"] == "no data"
    at_bound = ack_verdict({"n": 40.2, "p50": 0.012, "p99": 0.1})  # 0.1 s is a bucket bound: p99 <= 0.1 is met
    assert at_bound == {**at_bound, "status": "met", "value_s": 0.1, "p50_s": 0.012, "n": 40}
    assert ack_verdict({"n": 40.0, "p50": 0.012, "p99": 0.1001})["status"] == "missed"
    text = render_text(report(_job("a", 9, 200), {"n": 40.0, "p50": 0.012, "p99": 0.2}))
    assert "submit ack" in text and "200 ms" in text and "missed" in text and "p50 12 ms" in text


def test_the_ack_query_covers_the_submission_window_when_one_is_given() -> None:
    assert ack_window(None, None) == ("1h", None) and ack_window("5m", None) == ("5m", None)
    assert ack_window("5m", (1_700_000_000_000, 1_700_000_180_500)) == ("180500ms", 1_700_000_180.5)
    assert ack_window(None, (1_000, 1_001)) == ("1ms", 1.001) and ack_window(None, (5, 5)) == ("1ms", 0.005)


def test_an_unreachable_prometheus_is_an_error_not_a_figure() -> None:
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    got = ack_from_prometheus(f"http://127.0.0.1:{port}", timeout=2)
    assert set(got) == {"error"} and f"127.0.0.1:{port}" in got["error"]


def test_a_simulation_announces_its_private_services_to_the_local_prometheus_only_when_one_keeps_targets(
        tmp_path) -> None:
    import json
    from dataclasses import replace

    from spotreel.devstack.monitoring import Prometheus
    from spotreel.services.simulator.stack import announce
    from spotreel.config.settings import Settings

    base = Settings(home=tmp_path / "base")
    private = replace(base, home=tmp_path / "sim", topic_prefix="sim.abc", gateway_port=25000)
    assert announce(base, private, "abc") == []  # no `monitoring up` here: nothing written
    targets = Prometheus(base).targets_dir
    targets.mkdir(parents=True)
    paths = announce(base, private, "abc")
    groups = {p.name: json.loads(p.read_text()) for p in paths}
    assert groups["sim-abc-gateway.json"] == [
        {"targets": ["127.0.0.1:25004"], "labels": {"service": "gateway", "topic_prefix": "sim.abc"}}]
    assert set(groups) == {"sim-abc-scheduler.json", "sim-abc-projector.json", "sim-abc-webhooks.json",
                           "sim-abc-gateway.json"}


def test_a_counter_counts_what_it_counted_between_its_samples_a_restart_from_zero() -> None:
    assert counter_increase([]) == 0 and counter_increase([7.0]) == 0
    assert counter_increase([3.0, 3.0, 5.0, 9.0]) == 6  # no extrapolation past the first and last sample
    assert counter_increase([10.0, 12.0, 1.0, 4.0]) == 2 + 1 + 3  # restarted between 12 and 1


INF = float("inf")


def test_histogram_quantile_is_promqls_rule() -> None:
    # 30 observations: 4 up to 10 ms, 26 in (10, 25] ms.
    buckets = {0.005: 0.0, 0.01: 4.0, 0.025: 30.0, 0.05: 30.0, 0.1: 30.0, INF: 30.0}
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.01 + 0.015 * (29.7 - 4) / 26)
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.01 + 0.015 * (15 - 4) / 26)
    assert histogram_quantile(0.1, buckets) == pytest.approx(0.005 + 0.005 * 3 / 4)
    assert histogram_quantile(0.0, {0.01: 2.0, INF: 2.0}) == 0.0  # the first bucket starts at 0
    assert histogram_quantile(0.99, {0.01: 2.0, 0.1: 2.0, INF: 10.0}) == 0.1  # in +Inf: the highest bound
    assert histogram_quantile(0.5, {0.01: 3.0, 0.025: 2.0, INF: 4.0}) == pytest.approx(0.01 * 2 / 3)  # made monotonic
    assert histogram_quantile(0.5, {0.01: 0.0, INF: 0.0}) is None  # nothing observed
    assert histogram_quantile(0.5, {0.01: 1.0, 0.1: 1.0}) is None  # no +Inf bucket
