"""`spotreel replay` prints times a person reads: instants as UTC ISO 8601, durations as s / m / h."""

from __future__ import annotations

from spotreel.services.scheduler.replay import _describe, human_duration, human_time
from tests.unit.jobkit import T0, Driver


def test_instants_and_durations() -> None:
    assert human_time(T0) == "2023-11-14T22:13:20.000Z"
    assert human_time(T0 + 1_234) == "2023-11-14T22:13:21.234Z"
    assert [human_duration(ms) for ms in (850, 12_500, 185_000, 7_260_000)] == ["850ms", "12.5s", "3m05s", "2h01m"]


def test_an_events_fields_name_times_not_epoch_milliseconds() -> None:
    d = Driver()
    d.submit()
    leased = d.grant(ttl=30_000)[0]
    text = _describe(leased)
    assert "lease_ttl_ms=30.0s" in text
    assert f"lease_expires_at_ms={human_time(T0 + 30_000)}" in text
    assert str(T0 + 30_000) not in text
