"""The cron schedule aggregate: one job per occurrence, missed-occurrence policies, lifecycle."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain import ids
from spotreel.domain.decide import decide
from spotreel.domain.evolve import fold
from spotreel.domain.spec import SPEC_FIELDS, RenderSpec
from spotreel.domain.schedules import ScheduleState, decide_schedule, evolve_schedule, fold_schedule, submit_for
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit

HOUR = 3_600_000
MIN = 60_000
T = 1_700_000_000_000 // HOUR * HOUR  # on the hour


def create(**overrides: Any) -> c.CreateSchedule:
    base = c.CreateSchedule(
        command_id="create",
        schedule_id="nightly",
        tenant="acme",
        cron="0 * * * *",
        timezone="UTC",
        missed_policy="skip",
        spec=RenderSpec(model="tiny-t2v", prompt="timelapse", duration_s=2.0, resolution="512x512", fps=8, seed=1,
                        num_steps=10),
        gpu_type="h100",
    )
    video = {k: overrides.pop(k) for k in list(overrides) if k in SPEC_FIELDS}  # the template's video fields
    return replace(base, spec=replace(base.spec, **video), **overrides)


class Sched:
    def __init__(self, now: int = T + 5 * MIN, **overrides: Any) -> None:
        self.state: ScheduleState | None = None
        self.history: list[Any] = []
        self.n = 0
        self.out = self.send(create(**overrides), now)

    def send(self, command: Any, now: int) -> tuple[Any, ...]:
        out = decide_schedule(self.state, command, now)
        self.state = fold_schedule(out, self.state)
        self.history.extend(o for o in out if not isinstance(o, ev.ScheduleCommandRejected))
        return out

    def fire(self, now: int) -> tuple[Any, ...]:
        self.n += 1
        return self.send(c.FireOccurrence(f"fire-{self.n}", "nightly"), now)


def _fired(out: tuple[Any, ...]) -> list[int]:
    return [e.occurrence_ms for e in out if isinstance(e, ev.OccurrenceFired)]


def _rejected(out: tuple[Any, ...]) -> str:
    assert len(out) == 1 and isinstance(out[0], ev.ScheduleCommandRejected), out
    return out[0].reason


def test_create_arms_the_timer_for_the_next_occurrence() -> None:
    s = Sched()
    assert [type(e).__name__ for e in s.out] == ["ScheduleCreated", "ScheduleAdvanced"]
    assert [e.version for e in s.out] == [1, 2]
    assert s.state is not None and s.state.next_occurrence_ms == T + HOUR
    assert s.state.last_tick_ms == T + 5 * MIN and s.state.tenant == "acme"


def test_a_timer_that_fires_early_is_rejected() -> None:
    s = Sched()
    before = s.state
    assert _rejected(s.fire(T + HOUR - 1)) == "not_due"
    assert s.state == before


def test_on_time_fire_creates_one_deterministic_job() -> None:
    s = Sched()
    out = s.fire(T + HOUR + 1_000)
    assert [type(e).__name__ for e in out] == ["OccurrenceFired", "ScheduleAdvanced"]
    fired = out[0]
    assert fired.occurrence_ms == T + HOUR and not fired.late
    assert fired.job_id == ids.job_id_for_occurrence("acme", "nightly", T + HOUR)
    assert out[1].next_occurrence_ms == T + 2 * HOUR and out[1].through_ms == T + HOUR + 1_000
    assert s.state is not None and s.state.fired == 1 and s.state.last_fired_occurrence_ms == T + HOUR


def test_the_submission_for_an_occurrence_is_idempotent() -> None:
    s = Sched()
    fired = s.fire(T + HOUR)[0]
    assert s.state is not None
    submit = submit_for(s.state, fired)
    assert submit == submit_for(s.state, fired)
    assert (submit.schedule_id, submit.occurrence_ms, submit.spec.prompt) == ("nightly", T + HOUR, "timelapse")
    out = decide(None, submit, T + HOUR)
    assert [type(e).__name__ for e in out] == ["JobSubmitted", "JobQueued"]
    assert decide(fold(out), submit, T + HOUR + 5) == ()  # a replayed tick creates nothing


def test_skip_fires_nothing_that_is_beyond_the_grace() -> None:
    s = Sched(missed_policy="skip", grace_ms=MIN)
    out = s.fire(T + 3 * HOUR + 2 * MIN)
    assert _fired(out) == []
    skipped = out[0]
    assert isinstance(skipped, ev.OccurrencesSkipped)
    assert (skipped.first_occurrence_ms, skipped.last_occurrence_ms) == (T + HOUR, T + 3 * HOUR)
    assert s.state is not None and s.state.next_occurrence_ms == T + 4 * HOUR


def test_skip_still_fires_the_latest_when_it_is_within_the_grace() -> None:
    s = Sched(missed_policy="skip", grace_ms=MIN)
    out = s.fire(T + 3 * HOUR + 30_000)
    assert _fired(out) == [T + 3 * HOUR]
    assert (out[0].first_occurrence_ms, out[0].last_occurrence_ms) == (T + HOUR, T + 2 * HOUR)


def test_run_once_coalesces_missed_occurrences() -> None:
    s = Sched(missed_policy="run_once")
    out = s.fire(T + 3 * HOUR + 10 * MIN)
    assert _fired(out) == [T + 3 * HOUR]
    assert out[1].late


def test_run_all_catches_up_within_the_cap() -> None:
    s = Sched(missed_policy="run_all", max_catchup=2)
    out = s.fire(T + 4 * HOUR + MIN)
    assert _fired(out) == [T + 3 * HOUR, T + 4 * HOUR]
    assert (out[0].first_occurrence_ms, out[0].last_occurrence_ms) == (T + HOUR, T + 2 * HOUR)
    s2 = Sched(missed_policy="run_all")
    assert _fired(s2.fire(T + 4 * HOUR + MIN)) == [T + HOUR, T + 2 * HOUR, T + 3 * HOUR, T + 4 * HOUR]


def test_start_ms_counts_an_occurrence_exactly_at_the_start() -> None:
    s = Sched(start_ms=T + HOUR)
    assert s.state is not None and s.state.next_occurrence_ms == T + HOUR


def test_delete_stops_the_schedule() -> None:
    s = Sched()
    out = s.send(c.DeleteSchedule("del", "nightly"), T + 10 * MIN)
    assert [type(e).__name__ for e in out] == ["ScheduleDeleted"]
    assert s.state is not None and s.state.deleted
    assert _rejected(s.fire(T + 2 * HOUR)) == "schedule_deleted"
    assert _rejected(s.send(c.DeleteSchedule("del2", "nightly"), T)) == "schedule_deleted"
    assert _rejected(s.send(create(), T)) == "schedule_exists"


def test_unknown_schedule_and_unknown_command() -> None:
    assert _rejected(decide_schedule(None, c.FireOccurrence("f", "x"), T)) == "unknown_schedule"
    assert _rejected(decide_schedule(None, c.DeleteSchedule("d", "x"), T)) == "unknown_schedule"
    assert _rejected(decide_schedule(None, c.CancelJob("x", "j"), T)) == "unknown_command"


@pytest.mark.parametrize(
    "overrides",
    [
        {"cron": "not a cron"},
        {"cron": "H * * * *"},
        {"timezone": "Mars/Olympus"},
        {"overlap_policy": "sometimes"},
        {"missed_policy": "sometimes"},
        {"grace_ms": -1},
        {"max_catchup": 0},
        {"num_steps": 0},
        {"tenant": ""},
    ],
)
def test_invalid_schedules_are_rejected(overrides: dict) -> None:
    assert _rejected(decide_schedule(None, create(**overrides), T)) == "invalid_request"


def test_schedule_replay_rebuilds_the_state_and_ignores_rejections() -> None:
    s = Sched(missed_policy="run_all")
    s.fire(T + HOUR)
    s.fire(T + HOUR + 1)  # rejected: not due
    s.fire(T + 3 * HOUR)
    rejected = ev.ScheduleCommandRejected("nightly", 3, T, "x", "x", "FireOccurrence", "not_due", "")
    assert fold_schedule([*s.history[:3], rejected, *s.history[3:]]) == s.state
    assert evolve_schedule(None, s.history[1]) is None
    assert evolve_schedule(s.state, object()) == s.state
    assert [e.version for e in s.history] == list(range(1, len(s.history) + 1))


# croniter makes each example slow; 300 examples cover three policies times many gap patterns.
@settings(max_examples=examples(300), deadline=None)
@given(
    policy=st.sampled_from(["skip", "run_once", "run_all"]),
    gaps=st.lists(st.integers(0, 5 * HOUR), min_size=1, max_size=6),
)
def test_an_occurrence_never_fires_twice_and_time_only_moves_forward(policy: str, gaps: list[int]) -> None:
    s = Sched(missed_policy=policy, cron="*/20 * * * *", max_catchup=5)
    now = T + 5 * MIN
    fired: list[int] = []
    for gap in gaps:
        now += gap
        assert s.state is not None
        before = s.state
        out = s.fire(now)
        if now < before.next_occurrence_ms:
            assert _rejected(out) == "not_due" and s.state == before
            continue
        new = _fired(out)
        assert new == sorted(new) and all(before.last_tick_ms < o <= now for o in new)
        fired.extend(new)
        assert s.state.last_tick_ms == now and s.state.next_occurrence_ms > now
    assert len(fired) == len(set(fired))
    assert fold_schedule(s.history) == s.state


def test_a_recorded_cron_that_no_longer_parses_is_refused_not_raised() -> None:
    s = Sched()
    assert s.state is not None
    broken = replace(s.state, created=replace(s.state.created, cron="61 * * * *"))
    out = decide_schedule(broken, c.FireOccurrence("f", "nightly"), T + 2 * HOUR)
    assert _rejected(out) == "cron_error"


def test_a_start_beyond_the_calendar_is_refused() -> None:
    assert _rejected(decide_schedule(None, create(start_ms=10**18), T)) == "invalid_request"


OPTIONS = {"timeout_ms": 600_000, "guidance_scale": 4.5, "negative_prompt": "blurry, text", "sampler": "dpmpp"}


def test_an_occurrences_job_carries_the_templates_time_limit_and_render_options() -> None:
    s = Sched(**OPTIONS)
    created = s.out[0]
    assert isinstance(created, ev.ScheduleCreated)
    assert {k: getattr(created.spec if k in SPEC_FIELDS else created, k) for k in OPTIONS} == OPTIONS
    fired = s.fire(T + HOUR)[0]
    assert s.state is not None
    submit = submit_for(s.state, fired)
    assert {k: getattr(submit.spec if k in SPEC_FIELDS else submit, k) for k in OPTIONS} == OPTIONS
    [submitted, _] = decide(None, submit, T + HOUR)
    assert isinstance(submitted, ev.JobSubmitted)
    assert {k: getattr(submitted.spec if k in SPEC_FIELDS else submitted, k) for k in OPTIONS} == OPTIONS
    assert fold((submitted,)).spec.sampler == "dpmpp"  # type: ignore[union-attr]


def test_a_template_without_options_hashes_its_occurrences_as_before_they_existed() -> None:
    """A schedule created before the options (its ScheduleCreated decodes them as null) must give the same
    request hash after the upgrade, or a firing replayed across it would be refused idempotency_key_reused."""
    s = Sched()
    fired = s.fire(T + HOUR)[0]
    assert s.state is not None
    old_body = {name: getattr(s.state.created.spec if name in SPEC_FIELDS else s.state.created, name) for name in (
        "model", "gpu_type", "prompt", "duration_s", "resolution", "fps", "seed", "num_steps", "priority",
        "callback_url", "max_attempts", "max_preemptions", "keep_checkpoints", "backoff_base_ms", "backoff_max_ms",
        "poison_threshold", "poison_window_ms")}
    old_hash = ids.request_hash({**old_body, "schedule_id": "nightly", "occurrence_ms": T + HOUR})
    assert submit_for(s.state, fired).request_hash == old_hash
    with_options = Sched(**OPTIONS)
    assert with_options.state is not None
    assert submit_for(with_options.state, with_options.fire(T + HOUR)[0]).request_hash != old_hash


@pytest.mark.parametrize(("overrides", "words"), [
    ({"guidance_scale": 0.5}, "guidance_scale must be null or between 1 and 50"),
    ({"sampler": "dpm++ 2m"}, "sampler must be null or a sampler name"),
    ({"negative_prompt": "a\x00b"}, "negative_prompt must not contain NUL"),
    ({"timeout_ms": 1}, "timeout_ms must be null or between"),
])
def test_a_create_schedule_over_kafka_with_options_beyond_the_limits_is_refused(overrides: dict, words: str) -> None:
    [rejected] = decide_schedule(None, create(**overrides), T)
    assert isinstance(rejected, ev.ScheduleCommandRejected) and rejected.reason == "invalid_request"
    assert words in rejected.detail, rejected.detail


@pytest.mark.parametrize("name", ["CreateSchedule", "ScheduleCreated"])
def test_records_written_with_every_released_version_decode_with_the_options_null(name: str) -> None:
    """A CreateSchedule or ScheduleCreated already on the topics (released v1 and v2, before the options;
    the template flat up to v3) decodes to the dataclass with timeout_ms and the render options at None, its
    video in `spec` (lifted, codec/upcast.py); one written with v3 decodes to the same message too."""
    from spotreel.codec import Codec
    from spotreel.codec.registry import SchemaRegistry

    codec = Codec.default()
    released = codec.registry.released[f"spotreel.v1.{name}"]
    assert [v.version for v in released][:2] == [1, 2]
    created = Sched().out[0]
    message = create() if name == "CreateSchedule" else created
    assert [v.version for v in released] == [1, 2, 3, 4]
    flat = asdict(message)
    nested = dict(flat)
    nested["spec"] = {k: v for k, v in nested["spec"].items() if k != "input_image"}  # v4: before input_image
    flat.update(flat.pop("spec"))  # the flat shape v1-v3 wrote
    for version in released:
        old = Codec(SchemaRegistry.from_schemas([version.raw]))
        fields = {f["name"] for f in version.raw["fields"]}
        record = {k: v for k, v in (nested if "spec" in fields else flat).items() if k in fields}
        decoded = codec.decode_message(old.encode(name, record))
        assert decoded == message, version.version
        spec = decoded.spec
        assert (decoded.timeout_ms, spec.guidance_scale, spec.negative_prompt, spec.sampler) == (None,) * 4


def test_the_schedulers_table_reads_a_schedule_state_stored_flat_as_the_same_state_nested() -> None:
    """The Faust table's JSON of a schedule's state: written now with the template's video in `spec`, and a
    state written before (the ScheduleCreated inside it flat) reads back as the same state."""
    import json

    from spotreel.services.scheduler import statecodec

    s = Sched(**OPTIONS)
    s.fire(T + HOUR)
    assert s.state is not None
    raw = statecodec.dumps_schedule(s.state)
    assert statecodec.loads_schedule(raw) == s.state
    stored = json.loads(raw)
    stored["created"].update(stored["created"].pop("spec"))  # the shape written before the nesting
    assert statecodec.loads_schedule(json.dumps(stored).encode()) == s.state
