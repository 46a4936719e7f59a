"""The demo's pure parts: the request body it submits and the phases and history it reports."""

from __future__ import annotations

import pytest

from spotreel.demo.errors import DemoError
from spotreel.demo.request import VideoRequest, private_pool
from spotreel.demo.timeline import (Report, history_digest, queue_wait, render_time, states_passed,
                                    summary_lines, worker_split)


def req(**over) -> VideoRequest:
    base = dict(prompt="a fox", frames=8, fps=8, steps=20, seed=42, resolution="32x32", pool=private_pool("abc"))
    return VideoRequest(**(base | over))


@pytest.mark.parametrize("frames, fps", [(8, 8), (7, 3), (1, 24), (13, 8)])
def test_the_body_asks_for_exactly_the_frames(frames, fps):
    body = req(frames=frames, fps=fps).body()
    assert round(body["duration"] * body["fps"]) == frames  # what the worker renders (RenderRequest.from_job)
    assert body["model"] == "tiny-t2v" and body["gpu_type"] == "demo-abc"


@pytest.mark.parametrize("over", [{"frames": 0}, {"steps": 0}, {"seed": -1}, {"resolution": "30x32"},
                                  {"resolution": "big"}, {"pool": "nogpu"}, {"prompt": "  "}])
def test_bad_options_are_refused(over):
    with pytest.raises(DemoError):
        req(**over)


def ev(kind: str, at: str, rejected: bool = False) -> dict:
    return {"type": kind, "occurred_at": f"2026-11-23T10:00:{at}Z", "rejected": rejected}


HISTORY = [ev("JobSubmitted", "00.000"), ev("JobQueued", "00.000"), ev("JobLeased", "02.500"),
           ev("ProgressReported", "03.000"), ev("CheckpointRecorded", "04.000"), ev("ProgressReported", "05.000"),
           ev("CommandRejected", "05.500", rejected=True), ev("JobSucceeded", "09.750")]


def test_phases_come_from_the_history():
    assert queue_wait(HISTORY) == pytest.approx(2.5)
    assert render_time(HISTORY) == pytest.approx(7.25)
    assert queue_wait(HISTORY[:2]) is None and render_time(HISTORY[:3]) is None


def test_history_digest_lists_the_lifecycle_and_counts_the_rest():
    assert history_digest(HISTORY) == ("JobSubmitted → JobQueued → JobLeased → JobSucceeded  "
                                       "(+ 2 progress reports, 1 checkpoints, 1 rejected commands)")


def test_worker_split_uses_only_the_job_s_lines():
    lines = [{"event": "registered", "at": 1.0}, {"event": "leased", "job_id": "j1", "at": 10.0},
             {"event": "step", "job_id": "j1", "at": 11.0}, {"event": "step", "job_id": "j1", "at": 14.0},
             {"event": "job", "job_id": "j1", "at": 14.5}, {"event": "step", "job_id": "j2", "at": 99.0}]
    assert worker_split(lines, "j1") == (4.0, 0.5)
    assert worker_split(lines, "j3") == (None, None)


def test_states_collapse_repeats_and_the_summary_names_the_next_commands():
    assert states_passed(["accepted", "queued", "queued", "running", "running", "succeeded"]) == \
        ["accepted", "queued", "running", "succeeded"]
    r = Report(job_id="j1", statuses=["accepted", "running", "succeeded"], history=HISTORY, total_s=12.0,
               probe={"codec": "h264", "frames": 8, "width": 32, "height": 32, "fps": 8.0})
    text = "\n".join(summary_lines(r, "http://127.0.0.1:18700", "KEY"))
    assert "queue wait 2.5 s" in text and "render 7.2 s" in text and "spotreel status j1" in text
    assert "rest" not in text  # some phases were not measured: no remainder to tell
    r.stack_check_s, r.worker_start_s, r.download_s, r.worker_exit_s = 0.5, 1.0, 0.25, 0.5
    r.total_s = 13.0
    assert "rest 1.0 s" in "\n".join(summary_lines(r, "http://127.0.0.1:18700", "KEY"))  # 13 - 12
    assert "http://127.0.0.1:18700/v1/videos/j1/events" in text and "8 frames, 32x32, 8 fps" in text
