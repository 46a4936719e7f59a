"""The sizes block of `spotreel infra status` (devstack/sizes.py): what a person reads, unknown bytes included."""

from __future__ import annotations

import pytest

from spotreel.devstack.sizes import human_bytes, render
from spotreel.devstack.status import render_text

pytestmark = pytest.mark.unit


def test_bytes_read_as_a_person_reads_them():
    assert [human_bytes(n) for n in (None, 0, 1023, 1024, 5 * 2**20, 3 * 2**30)] == [
        "? B", "0 B", "1023 B", "1.0 KiB", "5.0 MiB", "3.0 GiB"]


def test_the_table_topics_and_buckets_each_get_a_line_and_errors_do_not_hide_the_rest():
    sizes = {"topics": [{"topic": "p.scheduler-jobs-changelog", "partitions": 6, "records": 12, "bytes": None}],
             "table": {"table": "jobs", "topic": "p.scheduler-jobs-changelog", "partitions": 6, "records": 12,
                       "bytes": None},
             "buckets_error": "EndpointConnectionError: no"}
    lines = render(sizes)
    assert lines[0] == "  sizes:"
    assert "    scheduler table jobs: changelog ? B, offset span 12" in lines
    assert "    topic p.scheduler-jobs-changelog: ? B, offset span 12 (6 partitions)" in lines
    assert "    buckets: unavailable (EndpointConnectionError: no)" in lines
    report = {"healthy": True, "home": "/h", "components": [
        {"name": "kafka", "address": "a", "pid": 1, "log": "l", "healthy": True, "state": "running", "detail": ""}],
        "gateway_url": "u", "dev_api_key": "k", "sizes": sizes}
    assert render_text(report).endswith("\n".join(lines))
