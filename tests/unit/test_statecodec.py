"""The scheduler's table format: dumps writes what `dataclasses.asdict` would (the format a running table
already holds), and loads reads every state of the golden histories back unchanged."""

from __future__ import annotations

import dataclasses
import json

import pytest

from spotreel.domain.evolve import evolve
from spotreel.services.scheduler import statecodec
from tests.unit.test_job_golden import GOLDEN, decode_event


JOB_HISTORIES = [p for p in sorted(GOLDEN.glob("*.json"))
                 if json.loads(p.read_text())["events"][0]["type"] == "JobSubmitted"]  # not the schedules'


@pytest.mark.parametrize("path", JOB_HISTORIES, ids=lambda p: p.stem)
def test_every_state_of_a_golden_history_round_trips_in_the_old_format(path) -> None:
    state = None
    seen = 0
    for record in json.loads(path.read_text())["events"]:
        state = evolve(state, decode_event(record))
        if state is None:
            continue
        raw = statecodec.dumps(state)
        assert raw == json.dumps(dataclasses.asdict(state), separators=(",", ":")).encode()
        assert statecodec.loads(raw) == state
        seen += 1
    assert seen > 0


def test_a_state_stored_flat_before_render_spec_loads_as_the_same_state() -> None:
    """The scheduler's table (and its changelog) holds states written before RenderSpec, the video's fields
    flat: they load to the state they were, nested, and are written back nested."""
    state = None
    for record in json.loads(JOB_HISTORIES[0].read_text())["events"]:
        state = evolve(state, decode_event(record))
    assert state is not None
    stored = json.loads(statecodec.dumps(state))
    spec = stored.pop("spec")
    flat = {**stored, **spec}
    loaded = statecodec.loads(json.dumps(flat).encode())
    assert loaded == state
    assert "spec" in json.loads(statecodec.dumps(loaded))
