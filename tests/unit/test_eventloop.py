"""The gateway's event loop setting (spotreel.runtime.eventloop): uvloop by default, the stock loop on request."""

from __future__ import annotations

import asyncio

import pytest

from spotreel.runtime import eventloop
from spotreel.config.settings import Settings

pytestmark = pytest.mark.unit


async def _kind() -> str:
    await asyncio.sleep(0)
    return eventloop.name_of(asyncio.get_running_loop())


def test_the_default_is_uvloop_and_each_choice_runs_on_its_loop() -> None:
    assert Settings().event_loop == "uvloop"
    for choice in eventloop.CHOICES:
        with asyncio.Runner(loop_factory=eventloop.factory(choice)) as runner:
            assert runner.run(_kind()) == choice


def test_an_unknown_loop_is_refused_at_start_with_the_variables_name() -> None:
    with pytest.raises(ValueError, match="SPOTREEL_EVENT_LOOP"):
        Settings.from_env({"SPOTREEL_EVENT_LOOP": "tokio"})
    assert Settings.from_env({"SPOTREEL_EVENT_LOOP": "asyncio"}).event_loop == "asyncio"
    with pytest.raises(ValueError, match="uvloop, asyncio"):
        eventloop.factory("")
