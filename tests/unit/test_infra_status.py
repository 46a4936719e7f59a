"""The status report: shape, and text a person can read."""

from __future__ import annotations

import pytest

from spotreel.devstack.status import render_json, render_text

pytestmark = pytest.mark.unit

REPORT = {
    "healthy": False,
    "home": "/h",
    "components": [
        {"name": "kafka", "address": "127.0.0.1:1", "pid": 42, "log": "/h/logs/kafka/server.log",
         "healthy": True, "state": "running", "detail": "cluster X"},
        {"name": "cassandra", "address": "127.0.0.1:2", "pid": None, "log": "/h/logs/cassandra/system.log",
         "healthy": False, "state": "stopped", "detail": "nothing listening on 127.0.0.1:2"},
    ],
    "gateway_url": "http://127.0.0.1:3",
    "dev_api_key": "sr_dev",
}


def test_text_names_each_component_its_pid_log_and_the_gateway():
    text = render_text(REPORT)
    assert text.splitlines()[0] == "spotreel local stack (/h): NOT healthy"
    assert "kafka" in text and "pid 42" in text and "/h/logs/kafka/server.log" in text
    assert "stopped" in text and "no pid" in text
    assert "gateway URL: http://127.0.0.1:3" in text and "dev API key: sr_dev" in text


def test_json_round_trips():
    import json

    assert json.loads(render_json(REPORT)) == REPORT
