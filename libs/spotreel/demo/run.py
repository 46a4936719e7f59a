"""The demo's steps in order: stack health, worker, submit, follow, download + verify, decode, summary.
Every failure is a DemoError naming what failed and the log to read; the worker is stopped and reaped and
an unfinished job is cancelled, whatever way the demo ends."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from spotreel.demo.errors import DemoError
from spotreel.demo.feed import StatusFeed
from spotreel.demo.request import VideoRequest
from spotreel.demo.timeline import Report, summary_lines
from spotreel.demo.worker import BackgroundWorker
from spotreel.client.http import Client, ClientError
from spotreel.client.cli import TERMINAL, progress_line
from spotreel.config.settings import Settings

Say = Callable[[str], None]


@dataclass(frozen=True)
class DemoOptions:
    video: VideoRequest
    out: Path
    timeout_s: float
    worker_log: Path
    token: str  # names this run's worker, idempotency key and (by default) pool


def new_token() -> str:
    return uuid.uuid4().hex[:8]


class Deadline:
    def __init__(self, seconds: float, what: Callable[[], str]) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.what = what

    def left(self) -> float:
        return self.at - time.monotonic()

    def check(self) -> None:
        if self.left() <= 0:
            raise DemoError(f"timed out after {self.seconds:g} s: {self.what()}")


def check_stack(settings: Settings) -> None:
    from spotreel.devstack.status import collect

    report = collect(settings)
    sick = [c for c in report["components"] if not c["healthy"]]  # type: ignore[union-attr]
    if sick:
        c = sick[0]
        more = f" (and {len(sick) - 1} more: {', '.join(str(s['name']) for s in sick[1:])})" if len(sick) > 1 else ""
        raise DemoError(f"the stack is not healthy: {c['name']} is {c['state']} ({c['detail']}){more}; "
                        f"log: {c['log']}; start it with `spotreel infra up` (or `make up`)")


class Demo:
    def __init__(self, settings: Settings, options: DemoOptions, say: Say) -> None:
        self.settings = settings
        self.opts = options
        self.say = say
        self.client = Client(settings.gateway_url, settings.dev_api_key)
        self.report = Report(request=options.video.describe(), worker_log=str(options.worker_log))
        self.worker: BackgroundWorker | None = None
        self.last: dict = {}

    # -- the steps ---------------------------------------------------------------------------------------

    def run(self) -> Report:
        started = time.monotonic()
        try:
            self._timed("stack_check_s", lambda: check_stack(self.settings))
            self.say(f"demo: stack healthy ({self.settings.gateway_url})")
            deadline = Deadline(self.opts.timeout_s, self._where)
            self._timed("worker_start_s", lambda: self._start_worker(deadline))
            self._submit()
            self._follow(deadline)
            self._download()
            self._decode()
            self._timed("worker_exit_s", self._finish_worker)
            self.report.history = self.client.events(self.report.job_id)
            self.report.worker_lines = self.worker.events() if self.worker else []
        except ClientError as exc:
            raise DemoError(f"{exc}; gateway log: {self.settings.logs_dir / 'gateway' / 'stdout.log'}") from None
        finally:
            self._cleanup()
        self.report.total_s = time.monotonic() - started
        for line in summary_lines(self.report, self.settings.gateway_url, self.settings.dev_api_key):
            self.say(line)
        return self.report

    def _start_worker(self, deadline: Deadline) -> None:
        self.worker = BackgroundWorker.start(self.settings, self.opts.video.pool, f"demo-{self.opts.token}",
                                             self.opts.worker_log)
        self.say(f"demo: worker pid {self.worker.pid} starting for pool {self.opts.video.pool} "
                 f"(log {self.opts.worker_log})")
        # The first start builds the tiny model under $SPOTREEL_HOME/models; later ones only load it.
        while self.worker.find("registered") is None:
            self._check_worker_alive("before it registered")
            deadline.check()
            time.sleep(0.2)
        self.say(f"demo: worker pid {self.worker.pid} registered")

    def _submit(self) -> None:
        answer = self.client.submit(self.opts.video.body(), idempotency_key=f"demo-{self.opts.token}")
        self.report.job_id = answer["job_id"]
        self.report.statuses.append(answer["status"])
        self.say(f"demo: submitted {answer['job_id']} ({self.opts.video.describe()}), "
                 f"queue position {answer.get('queue_position')}")

    def _follow(self, deadline: Deadline) -> None:
        feed = StatusFeed(self.client, self.report.job_id).start()
        shown = None
        try:
            while True:
                item = feed.next(timeout=min(0.5, max(0.01, deadline.left())))
                if item is None:
                    deadline.check()
                    self._check_worker_alive("while the job was not finished", finished_ok=True)
                    continue
                kind, data = item
                if kind == "error":
                    raise DemoError(f"{data}; worker log: {self.opts.worker_log}")
                self.last = data
                status = data.get("status", "?")
                self.report.statuses.append(status)
                self.report.resumed |= bool((data.get("progress") or {}).get("resuming"))
                line = progress_line(data)
                if line != shown:
                    self.say(line)
                    shown = line
                if status in TERMINAL:
                    break
        finally:
            feed.close()
        if status != "succeeded":
            raise DemoError(f"job {self.report.job_id} ended {status}: {self.last.get('error') or 'no error given'}; "
                            f"worker log: {self.opts.worker_log}")

    def _download(self) -> None:
        want = (self.last.get("result") or {}).get("sha256") or \
            (self.client.get(self.report.job_id).get("result") or {}).get("sha256")
        if not want:
            raise DemoError(f"job {self.report.job_id} succeeded but the API reports no checksum for its video")
        out = self.opts.out
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".part")
        t = time.monotonic()
        size, got = self.client.download(self.report.job_id, partial)
        if got != want:
            partial.unlink(missing_ok=True)
            raise DemoError(f"checksum mismatch for {self.report.job_id}: downloaded {got}, the API reports {want}")
        partial.replace(out)
        self.report.download_s = time.monotonic() - t
        self.report.video_path, self.report.size_bytes, self.report.sha256 = str(out.resolve()), size, got
        self.say(f"demo: downloaded {out} ({size} bytes), sha256 matches the API's")

    def _decode(self) -> None:
        from spotreel.media.video import probe

        try:
            info = probe(Path(self.report.video_path).read_bytes())
        except Exception as exc:  # PyAV raises its own error types for a broken file
            raise DemoError(f"{self.report.video_path} does not decode: {type(exc).__name__}: {exc}") from None
        v = self.opts.video
        if info["frames"] != v.frames or (info["width"], info["height"]) != v.size:
            raise DemoError(f"{self.report.video_path} decodes to {info['frames']} frames of "
                            f"{info['width']}x{info['height']}; asked for {v.frames} of {v.resolution}")
        self.report.probe = info

    def _finish_worker(self) -> None:
        # --once: the worker leaves by itself after its job; give it a moment before `stop` insists.
        if self.worker is not None:
            self.worker.wait_exit(10.0)

    # -- failure paths -----------------------------------------------------------------------------------

    def _check_worker_alive(self, when: str, finished_ok: bool = False) -> None:
        code = self.worker.exit_code() if self.worker else None
        if code is None:
            return
        outcome = self.worker.find("job", job_id=self.report.job_id) if self.report.job_id else None
        if finished_ok and outcome is not None and outcome.get("outcome") == "succeeded":
            return  # its job is done; the read model has not shown it yet
        detail = f"; its job ended {outcome['outcome']}: {outcome.get('detail')}" if outcome else ""
        raise DemoError(f"the worker exited with status {code} {when}{detail}; worker log: {self.opts.worker_log}")

    def _where(self) -> str:
        if not self.report.job_id:
            return f"the worker did not register; worker log: {self.opts.worker_log}"
        snap = progress_line(self.last).strip() if self.last else "no status seen yet"
        return f"job {self.report.job_id} is not finished ({snap}); worker log: {self.opts.worker_log}"

    def _cleanup(self) -> None:
        if self.report.job_id and self.last.get("status") not in TERMINAL:
            try:
                self.client.cancel(self.report.job_id)
                self.say(f"demo: cancelled {self.report.job_id}")
            except ClientError:
                pass  # the error that brought us here is the one to report
        if self.worker is not None:
            self.worker.stop()

    def _timed(self, name: str, step: Callable[[], None]) -> None:
        t = time.monotonic()
        step()
        setattr(self.report, name, time.monotonic() - t)
