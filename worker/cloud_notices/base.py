"""What every cloud reader shares: the warning it hands the watcher, and a small HTTP client for the
metadata service (plain urllib: one request at a time, on one thread, to one address)."""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Protocol

INTERRUPTION = "interruption"  # the machine goes away at `deadline`
REBALANCE = "rebalance"  # the machine is at raised risk of an interruption; no deadline


@dataclass(frozen=True)
class CloudWarning:
    cloud: str
    kind: str  # INTERRUPTION | REBALANCE
    detail: str  # what the cloud said, for the log and the worker's JSON line
    deadline: float | None = None  # epoch seconds by which the machine is gone (None: the cloud names none)


class MetadataError(Exception):
    """The metadata service could not be reached or answered something unusable: retried, never fatal."""


@dataclass(frozen=True)
class Response:
    status: int
    body: str
    headers: dict[str, str]


class Reader(Protocol):
    cloud: str

    def poll(self) -> CloudWarning | None:
        """One look (GCP's may wait for a change): a warning, or None. Raises MetadataError."""
        ...

    def acknowledge(self) -> None:
        """The worker has checkpointed and released: tell the cloud it may go on (Azure), else nothing."""
        ...


def request(method: str, url: str, headers: dict[str, str], timeout_s: float, body: bytes | None = None) -> Response:
    """One HTTP exchange. Every status is an answer (404 means "no notice" to the readers); only a failure
    to talk is MetadataError. No proxy: the metadata address is never reached through one."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout_s) as resp:
            return Response(resp.status, resp.read().decode("utf-8", "replace"), dict(resp.headers.items()))
    except urllib.error.HTTPError as exc:
        with exc:
            text = exc.read().decode("utf-8", "replace") if exc.fp is not None else ""
        return Response(exc.code, text, dict(exc.headers.items()) if exc.headers else {})
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        raise MetadataError(f"{method} {url}: {getattr(exc, 'reason', exc)}") from None


def join(base: str, path: str) -> str:
    return base.rstrip("/") + path
