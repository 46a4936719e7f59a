"""A small synchronous client of the public API for the `spotreel` client commands (cli.py):
standard library only, so it works wherever the package is installed. Every failure becomes a
`ClientError` with one line a person can act on, and the HTTP status and API error code for scripts."""

from __future__ import annotations

import hashlib
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from spotreel.api import sse


class ClientError(Exception):
    """One line: the gateway is unreachable, or it answered with an error. `status` and `code` are the
    HTTP status and the API's error code when the gateway answered (None when it could not be reached)."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None,
                 detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.detail = detail or {}

    def as_json(self) -> dict[str, Any]:
        return {"error": {"http_status": self.status, "code": self.code or "unreachable", "message": str(self),
                          **{k: v for k, v in self.detail.items() if k not in ("code", "message")}}}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@dataclass(frozen=True)
class Client:
    url: str
    key: str
    timeout: float = 30.0

    def _request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                 timeout: float | None = None, follow: bool = True):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url.rstrip("/") + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.key}", "Accept": "application/json",
            **({"Content-Type": "application/json"} if data is not None else {}), **(headers or {})})
        opener = urllib.request.build_opener(*([] if follow else [_NoRedirect()]))
        try:
            return opener.open(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as exc:
            if not follow and exc.code in (301, 302, 303, 307):
                return exc
            raise _api_error(exc) from None
        except urllib.error.URLError as exc:
            reason = exc.reason.strerror if isinstance(exc.reason, OSError) and exc.reason.strerror else exc.reason
            raise ClientError(f"cannot reach the gateway at {self.url} ({reason}); is the stack up? "
                              "(`spotreel infra up`)") from None
        except (socket.timeout, TimeoutError):
            raise ClientError(f"the gateway at {self.url} did not answer within {timeout or self.timeout:.0f} s") \
                from None
        except ConnectionError as exc:
            raise ClientError(f"the connection to the gateway at {self.url} failed ({exc})") from None

    def _path(self, job_id: str, tail: str = "") -> str:
        return f"/v1/videos/{urllib.parse.quote(job_id, safe='')}{tail}"

    def _json(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        with self._request(method, path, body, headers) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else {}

    def submit(self, body: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        return self._json("POST", "/v1/videos", body,
                          {"Idempotency-Key": idempotency_key} if idempotency_key else None)

    def get(self, job_id: str) -> dict[str, Any]:
        return self._json("GET", self._path(job_id))

    def cancel(self, job_id: str) -> dict[str, Any]:
        # POST .../cancel, as pause, resume and retry are spelled; DELETE /v1/videos/{id} is no longer served.
        return self._json("POST", self._path(job_id, "/cancel"))

    def pause(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", self._path(job_id, "/pause"))

    def resume(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", self._path(job_id, "/resume"))

    def retry(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", self._path(job_id, "/retry"))

    def set_priority(self, job_id: str, priority: int) -> dict[str, Any]:
        return self._json("PATCH", self._path(job_id), {"priority": priority})

    def jobs(self, status: str | None = None, limit: int = 50, page_token: str | None = None) -> dict[str, Any]:
        query = urllib.parse.urlencode({k: v for k, v in (("status", status), ("limit", limit),
                                                          ("page_token", page_token)) if v})
        return self._json("GET", f"/v1/videos?{query}")

    def history(self, job_id: str) -> dict[str, Any]:
        """`{"job_id", "events"}`: accepted events and rejected commands, oldest first."""
        return self._json("GET", self._path(job_id, "/events"))

    def events(self, job_id: str) -> list[dict[str, Any]]:
        return self.history(job_id).get("events", [])

    def attempts(self, job_id: str) -> dict[str, Any]:
        """`{"job_id", "attempts"}`: one entry per lease."""
        return self._json("GET", self._path(job_id, "/attempts"))

    def usage(self) -> dict[str, Any]:
        """GET /v1/usage: the key's own tenant's GPU-seconds."""
        return self._json("GET", "/v1/usage")

    def create_schedule(self, body: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        return self._json("POST", "/v1/schedules", body,
                          {"Idempotency-Key": idempotency_key} if idempotency_key else None)

    def _schedule_path(self, schedule_id: str, tail: str = "") -> str:
        return f"/v1/schedules/{urllib.parse.quote(schedule_id, safe='')}{tail}"

    def schedule(self, schedule_id: str) -> dict[str, Any]:
        return self._json("GET", self._schedule_path(schedule_id))

    def schedules(self, limit: int = 50, page_token: str | None = None) -> dict[str, Any]:
        query = urllib.parse.urlencode({k: v for k, v in (("limit", limit), ("page_token", page_token)) if v})
        return self._json("GET", f"/v1/schedules?{query}")

    def schedule_occurrences(self, schedule_id: str, limit: int = 50, page_token: str | None = None) -> dict[str, Any]:
        query = urllib.parse.urlencode({k: v for k, v in (("limit", limit), ("page_token", page_token)) if v})
        return self._json("GET", self._schedule_path(schedule_id, f"/occurrences?{query}"))

    def schedule_command(self, schedule_id: str, action: str) -> dict[str, Any]:
        """pause, resume (POST) or delete (DELETE)."""
        if action == "delete":
            return self._json("DELETE", self._schedule_path(schedule_id))
        return self._json("POST", self._schedule_path(schedule_id, f"/{action}"))

    def submit_dag(self, body: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        return self._json("POST", "/v1/dags", body, {"Idempotency-Key": idempotency_key} if idempotency_key else None)

    def download(self, job_id: str, out: Path) -> tuple[int, str]:
        """Writes the finished video to `out` (from the object store the gateway redirects to);
        returns its size and sha256."""
        url = self.content_url(job_id)
        digest, size = hashlib.sha256(), 0
        try:
            with urllib.request.urlopen(url, timeout=60) as resp, open(out, "wb") as fh:  # noqa: S310
                while chunk := resp.read(1 << 16):
                    digest.update(chunk)
                    size += len(chunk)
                    fh.write(chunk)
        except OSError as exc:
            raise ClientError(f"download from the object store failed: {exc}") from None
        return size, digest.hexdigest()

    def content_url(self, job_id: str) -> str:
        resp = self._request("GET", self._path(job_id, "/content"), follow=False)
        with resp:
            location = resp.headers.get("Location")
        if not location:
            raise ClientError(f"the gateway answered {resp.status} without a download location")
        return urllib.parse.urljoin(self.url, location)

    def stream(self, job_id: str, timeout: float = 120.0) -> Iterator[tuple[str, Any]]:
        """(event, data) pairs of one connection to the SSE stream until it ends. `timeout` bounds the
        silence between lines (the gateway sends a keep-alive comment every 15 s)."""
        for m in self.messages(job_id, timeout=timeout):
            yield m.event, m.data

    def messages(self, job_id: str, last_event_id: str | None = None,
                 timeout: float = 120.0) -> Iterator[sse.Message]:
        """One connection to the SSE stream, with ids; `last_event_id` resumes after that event
        (spotreel/api/sse.py). A drop shows as OSError or ValueError from the iteration; watch.py reconnects."""
        headers = {"Accept": "text/event-stream"} | ({"Last-Event-ID": last_event_id} if last_event_id else {})
        resp = self._request("GET", self._path(job_id, "/stream"), headers=headers, timeout=timeout)
        with resp:
            yield from sse.parse(resp)


def _api_error(exc: urllib.error.HTTPError) -> ClientError:
    try:
        err = json.loads(exc.read() or b"{}").get("error", {})
    except (ValueError, AttributeError):
        err = {}
    if not isinstance(err, dict):
        err = {}
    return ClientError(_error_line(exc, err), exc.code, err.get("code") or "http_error", err)


def _error_line(exc: urllib.error.HTTPError, err: dict[str, Any]) -> str:
    code, message = err.get("code", exc.reason), err.get("message", "")
    field = f" (field {err['field']})" if err.get("field") else ""
    retry = exc.headers.get("Retry-After")
    return f"the gateway answered {exc.code} {code}: {message}{field}" + (f"; retry in {retry} s" if retry else "")
