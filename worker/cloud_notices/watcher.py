"""The thread that reads the cloud's warnings and hands them to the worker's PreemptionNotice.

An interruption becomes `notice.trigger(reason, grace)` with the grace its deadline leaves, less a margin
for the process to end (`grace_for`); `trigger` keeps the smaller of that and `--grace`. A rebalance
recommendation becomes `notice.advise(reason)`. The metadata service failing (refused, timing out,
answering nonsense) is logged and retried with a capped exponential backoff: it never ends the worker, and
the worker's own SIGTERM path still works meanwhile. After an interruption the thread stops reading; the
worker calls `finish()` once it has released its lease, which approves the event where the cloud takes an
answer (Azure) and stops the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from spotreel.worker.cloud_notices.base import INTERRUPTION, CloudWarning, MetadataError, Reader
from spotreel.worker.signals import PreemptionNotice

log = logging.getLogger("spotreel.worker.cloud_notices")

MAX_BACKOFF_S = 30.0
# The least grace a notice gives: even a deadline already past leaves the worker this long to release.
MIN_GRACE_S = 1.0


def grace_for(deadline: float | None, now: float, margin_s: float) -> float | None:
    """Seconds the worker may take for its checkpoint and release: until the deadline, less the margin
    (never under MIN_GRACE_S). None when the cloud names no deadline (the configured grace applies)."""
    if deadline is None:
        return None
    return max(MIN_GRACE_S, deadline - now - margin_s)


def backoff(failures: int, poll_s: float) -> float:
    """Wait after the `failures`-th failure in a row: the poll interval doubled each time, capped."""
    return min(MAX_BACKOFF_S, poll_s * 2 ** max(0, failures - 1))


class NoticeWatcher:
    def __init__(self, reader: Reader, notice: PreemptionNotice, poll_s: float, margin_s: float,
                 report: Callable[..., None] | None = None, wall: Callable[[], float] = time.time) -> None:
        self.reader = reader
        self.notice = notice
        self.poll_s = poll_s
        self.margin_s = margin_s
        self.report = report or (lambda kind, **fields: None)
        self._wall = wall
        self._stop = threading.Event()
        self._interrupted = False
        self.failures = 0  # in a row
        self._thread = threading.Thread(target=self._loop, name=f"cloud-notices-{reader.cloud}", daemon=True)

    def start(self) -> "NoticeWatcher":
        log.info("reading %s preemption notices every %.1f s", self.reader.cloud, self.poll_s)
        self._thread.start()
        return self

    def finish(self) -> None:
        """The worker is done (its lease released, or it is exiting): approve a pending event, stop."""
        self._stop.set()
        if self._interrupted:
            try:
                self.reader.acknowledge()
            except MetadataError as exc:
                log.warning("could not acknowledge the %s notice: %s", self.reader.cloud, exc)
        self._thread.join(2.0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                warning = self.reader.poll()
            except Exception as exc:  # whatever the service or a parser did, the thread must go on reading
                self.failures += 1
                wait = backoff(self.failures, self.poll_s)
                detail = exc if isinstance(exc, MetadataError) else f"{type(exc).__name__}: {exc}"
                log.warning("%s metadata service: %s; retrying in %.1f s", self.reader.cloud, detail, wait)
                self._stop.wait(wait)
                continue
            if self.failures:
                log.info("%s metadata service answers again", self.reader.cloud)
            self.failures = 0
            if warning is not None:
                self.handle(warning)
                if warning.kind == INTERRUPTION:
                    return
            self._stop.wait(self.poll_s)

    def handle(self, warning: CloudWarning) -> None:
        now = self._wall()
        reason = f"{warning.cloud}_{warning.kind}"
        fields: dict[str, Any] = {"cloud": warning.cloud, "notice": warning.kind, "detail": warning.detail}
        if warning.kind == INTERRUPTION:
            self._interrupted = True
            grace = grace_for(warning.deadline, now, self.margin_s)
            self.notice.trigger(reason, grace)
            fields.update(deadline_in_s=None if warning.deadline is None else round(warning.deadline - now, 3),
                          grace_s=round(self.notice.seconds_left(), 3))
            log.warning("%s: emergency checkpoint and lease release within %.1f s", warning.detail,
                        self.notice.seconds_left())
        else:
            self.notice.advise(reason)
            log.warning("%s: checkpointing now, finishing the current job, then taking no new work", warning.detail)
        self.report("cloud_notice", **fields)


def open_watcher(cloud: str, endpoint: str, notice: PreemptionNotice, poll_s: float, margin_s: float,
                 report: Callable[..., None] | None = None) -> NoticeWatcher:
    """The started watcher of `cloud` ("aws", "gcp" or "azure"), its metadata service at `endpoint`
    (empty: the cloud's own address)."""
    from spotreel.worker.cloud_notices.aws import AwsReader
    from spotreel.worker.cloud_notices.azure import AzureReader
    from spotreel.worker.cloud_notices.gcp import GcpReader

    readers: dict[str, Callable[[str], Reader]] = {"aws": AwsReader, "gcp": GcpReader, "azure": AzureReader}
    return NoticeWatcher(readers[cloud](endpoint), notice, poll_s, margin_s, report).start()
