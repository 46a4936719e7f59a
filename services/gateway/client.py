"""A small synchronous client of the public API for the `spotreel submit/status/watch/get/cancel/jobs`
commands: standard library only, so it works wherever the package is installed. Every failure becomes a
`ClientError` with one line a person can act on."""

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


class ClientError(Exception):
    """One line: the gateway is unreachable, or it answered with an error."""


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
            raise ClientError(_error_line(exc)) from None
        except urllib.error.URLError as exc:
            reason = exc.reason.strerror if isinstance(exc.reason, OSError) and exc.reason.strerror else exc.reason
            raise ClientError(f"cannot reach the gateway at {self.url} ({reason}); is the stack up? "
                              "(`spotreel infra up`)") from None
        except (socket.timeout, TimeoutError):
            raise ClientError(f"the gateway at {self.url} did not answer within {timeout or self.timeout:.0f} s") \
                from None
        except ConnectionError as exc:
            raise ClientError(f"the connection to the gateway at {self.url} failed ({exc})") from None

    def _json(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        with self._request(method, path, body, headers) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else {}

    def submit(self, body: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        return self._json("POST", "/v1/videos", body,
                          {"Idempotency-Key": idempotency_key} if idempotency_key else None)

    def get(self, job_id: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/videos/{urllib.parse.quote(job_id)}")

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._json("DELETE", f"/v1/videos/{urllib.parse.quote(job_id)}")

    def jobs(self, status: str | None = None, limit: int = 50) -> dict[str, Any]:
        query = urllib.parse.urlencode({k: v for k, v in (("status", status), ("limit", limit)) if v})
        return self._json("GET", f"/v1/videos?{query}")

    def events(self, job_id: str) -> list[dict[str, Any]]:
        """The job's history, oldest first: accepted events and rejected commands."""
        return self._json("GET", f"/v1/videos/{urllib.parse.quote(job_id)}/events").get("events", [])

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
        resp = self._request("GET", f"/v1/videos/{urllib.parse.quote(job_id)}/content", follow=False)
        with resp:
            location = resp.headers.get("Location")
        if not location:
            raise ClientError(f"the gateway answered {resp.status} without a download location")
        return urllib.parse.urljoin(self.url, location)

    def stream(self, job_id: str, timeout: float = 120.0) -> Iterator[tuple[str, Any]]:
        """(event, data) pairs of the SSE stream until it ends. `timeout` bounds the silence between lines
        (the gateway sends a keep-alive comment every 15 s)."""
        resp = self._request("GET", f"/v1/videos/{urllib.parse.quote(job_id)}/stream",
                             headers={"Accept": "text/event-stream"}, timeout=timeout)
        event, data = "message", []
        with resp:
            for raw in resp:
                line = raw.decode(errors="replace").rstrip("\r\n")
                if not line:
                    if data:
                        yield event, json.loads("\n".join(data))
                    event, data = "message", []
                elif line.startswith(":"):
                    continue
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())


def _error_line(exc: urllib.error.HTTPError) -> str:
    try:
        err = json.loads(exc.read() or b"{}").get("error", {})
    except ValueError:
        err = {}
    code, message = err.get("code", exc.reason), err.get("message", "")
    field = f" (field {err['field']})" if err.get("field") else ""
    retry = exc.headers.get("Retry-After")
    return f"the gateway answered {exc.code} {code}: {message}{field}" + (f"; retry in {retry} s" if retry else "")
