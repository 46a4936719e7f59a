"""The default transport: the gateway's worker API under /internal (services/gateway/worker_api/routes.py).

Plain `urllib` (no extra dependency), one short-lived connection per call: calls are seconds apart and
come from two threads (the run and the heartbeat), so there is no connection state to share or guard.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from spotreel.runtime import tracing
from spotreel.dispatch.intake import SENT_AT_HTTP_HEADER
from spotreel.worker.transport import WorkerLease, TransportError, Verdict, WorkerProfile, judge


_MAX_CHECKPOINT_MS = 24 * 3600 * 1000


class Refused(TransportError):
    """The gateway refused the request itself (bad key, bad field): retrying the same call cannot help."""


class HttpTransport:
    def __init__(self, base_url: str, worker_key: str, profile: WorkerProfile, timeout_s: float = 30.0) -> None:
        self.base = base_url.rstrip("/") + "/internal"
        self.key = worker_key
        self.profile = profile
        self.timeout_s = timeout_s

    # -- plumbing ----------------------------------------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any], timeout_s: float | None = None) -> tuple[int, dict[str, Any]]:
        """(status, JSON answer); a refusal's Retry-After (429/503) goes into its error as `retry_after_s`."""
        headers = {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json",
                   # When this was sent: a lease command is judged at it, not at when a gateway behind got
                   # it into the log (spotreel.dispatch.intake).
                   SENT_AT_HTTP_HEADER: str(int(time.time() * 1000))}
        traced = tracing.current_traceparent()  # inside a traced lease's span (job.py) only
        if traced is not None:
            headers[tracing.TRACEPARENT] = traced
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(), method="POST",
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else {}
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                payload = json.loads(raw) if raw else {}
            except ValueError:
                payload = {"error": {"code": "http_error", "message": raw[:200].decode(errors="replace")}}
            retry_after = (exc.headers or {}).get("Retry-After", "")
            if retry_after.isdigit() and isinstance(payload, dict) and isinstance(payload.get("error"), dict):
                payload["error"]["retry_after_s"] = int(retry_after)
            return exc.code, payload
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as exc:
            raise TransportError(f"gateway {self.base}{path}: {exc}") from None
        except ValueError as exc:
            raise TransportError(f"gateway {self.base}{path}: answer is not JSON ({exc})") from None

    def _fenced(self, lease: WorkerLease, action: str, extra: dict[str, Any]) -> Verdict:
        body = {"epoch": lease.epoch, "worker_id": self.profile.worker_id,
                "command_id": f"{action[:4]}-{uuid.uuid4().hex}", **extra}
        status, payload = self._post(f"/leases/{lease.job_id}/{action}", body)
        if status in (200, 202):
            return Verdict(accepted=status == 200, pending=status == 202, event=payload.get("event"),
                           cancel=bool(payload.get("cancel")), drain=bool(payload.get("drain")),
                           lease_expires_at_ms=payload.get("lease_expires_at_ms"),
                           renew_in_s=payload.get("renew_in_seconds"))
        err = payload.get("error", {}) if isinstance(payload, dict) else {}
        if status == 409:
            return judge(err.get("reason") or err.get("code"), err.get("message", ""), err.get("current_epoch"))
        self._raise(status, err, action)
        raise AssertionError("unreachable")

    @staticmethod
    def _raise(status: int, err: dict[str, Any], what: str) -> None:
        message = f"gateway refused {what}: {status} {err.get('code', '')} {err.get('message', '')}".strip()
        if status in (429, 502, 503, 504) or status >= 500:
            raise TransportError(message, retry_after_s=err.get("retry_after_s"))
        raise Refused(message)

    # -- the interface -----------------------------------------------------------------------------------

    def register(self) -> dict[str, Any]:
        p = self.profile
        status, payload = self._post(f"/workers/{p.worker_id}/register",
                                     {"gpu_type": p.gpu_type, "models": list(p.models),
                                      "warm_models": list(p.warm_models), "fingerprint": p.fingerprint})
        if status != 200:
            self._raise(status, payload.get("error", {}), "register")
        return payload

    def lease(self, wait_seconds: float, draining: bool = False, lease_ttl_ms: int | None = None) -> WorkerLease | None:
        p = self.profile
        body: dict[str, Any] = {"gpu_type": p.gpu_type, "models": list(p.models), "warm_models": list(p.warm_models),
                                "wait_seconds": wait_seconds, "draining": draining, "fingerprint": p.fingerprint}
        if lease_ttl_ms is not None:
            body["lease_ttl_ms"] = lease_ttl_ms
        # The gateway may overrun the wait by one dispatch answer; leave room for it.
        status, payload = self._post(f"/workers/{p.worker_id}/lease", body, timeout_s=wait_seconds + 15.0)
        if status == 204:
            return None
        if status != 200:
            self._raise(status, payload.get("error", {}), "lease")
        return WorkerLease.from_answer(payload)

    def heartbeat(self, lease: WorkerLease) -> Verdict:
        return self._fenced(lease, "heartbeat", {})

    def progress(self, lease: WorkerLease, step: int, progress_pct: float, phase: str) -> Verdict:
        return self._fenced(lease, "progress", {"step": step, "progress_pct": progress_pct, "phase": phase})

    def checkpoint(self, lease: WorkerLease, key: str, step: int, progress_pct: float, checksum: str,
                   size_bytes: int, duration_ms: int | None = None, fingerprint: str = "") -> Verdict:
        body: dict[str, Any] = {"checkpoint_key": key, "step": step, "progress_pct": progress_pct,
                                "checksum": checksum, "size_bytes": size_bytes}
        if fingerprint:
            body["fingerprint"] = fingerprint
        # The gateway refuses a write time outside 0..1 day (422); a clock jump must not cost the checkpoint.
        if duration_ms is not None and 0 <= duration_ms <= _MAX_CHECKPOINT_MS:
            body["duration_ms"] = int(duration_ms)
        return self._fenced(lease, "checkpoint", body)

    def complete(self, lease: WorkerLease, artifact_key: str, checksum: str, size_bytes: int) -> Verdict:
        return self._fenced(lease, "complete", {"artifact_key": artifact_key, "artifact_checksum": checksum,
                                                "artifact_size_bytes": size_bytes})

    def fail(self, lease: WorkerLease, error_code: str, message: str, retryable: bool = True,
             invalid_checkpoint_key: str | None = None) -> Verdict:
        body: dict[str, Any] = {"error_code": error_code, "error_message": message[:2000], "retryable": retryable}
        if invalid_checkpoint_key:
            body["invalid_checkpoint_key"] = invalid_checkpoint_key
        return self._fenced(lease, "fail", body)

    def release(self, lease: WorkerLease, reason: str = "preempted") -> Verdict:
        return self._fenced(lease, "release", {"reason": reason})

    def close(self) -> None:
        pass
