"""The gateway's access log leaves out the worker API's successful requests, and only those."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from spotreel.services.gateway.service import AccessLog


def test_the_worker_apis_successes_are_not_logged_but_its_errors_and_public_requests_are(caplog) -> None:
    log = AccessLog(logging.getLogger("test.access"), '%r %s')
    with caplog.at_level(logging.INFO, logger="test.access"):
        for path, status in [("/internal/leases/j1/heartbeat", 200), ("/internal/workers/w/lease", 204),
                             ("/internal/leases/j1/progress", 409), ("/v1/videos", 202)]:
            request = SimpleNamespace(path=path, method="POST", path_qs=path, version=SimpleNamespace(major=1, minor=1),
                                      remote="127.0.0.1", headers={})
            log.log(request, SimpleNamespace(status=status, body_length=0, headers={}), 0.001)
    assert [r.getMessage().rsplit(" ", 1)[1] for r in caplog.records] == ["409", "202"]
