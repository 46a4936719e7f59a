"""The few log lines that explain why a server did not start, read only from what this start wrote."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_MEANINGFUL = re.compile(
    r"\b(ERROR|FATAL|SEVERE)\b|Exception|\bError\b|Caused by:|Address already in use|refused|denied|"
    r"Unrecognized|[Ii]nvalid|Unable to|[Cc]annot|[Cc]ould not|unsupported|panic:"
)
_FRAME = re.compile(r"^\s*(at |\.\.\. \d+ more|goroutine |\S+\.go:\d+)")
_MAX_READ = 512 * 1024


@dataclass(frozen=True)
class LogMark:
    """A log file and its size before a start, so old runs' errors are never blamed on this one."""

    path: Path
    offset: int

    @classmethod
    def at_end(cls, path: Path) -> "LogMark":
        try:
            return cls(path, path.stat().st_size)
        except OSError:
            return cls(path, 0)

    def new_text(self) -> str:
        try:
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                start = self.offset if self.offset <= size else 0  # rotated or truncated: read it all
                start = max(start, size - _MAX_READ)
                f.seek(start)
                return f.read().decode(errors="replace")
        except OSError:
            return ""


def gist(text: str, *, ignore: tuple[str, ...] = (), limit: int = 3, width: int = 240) -> list[str]:
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip() and not ln.startswith("=== spotreel infra")]
    lines = [ln for ln in lines if not _FRAME.match(ln) and not any(i in ln for i in ignore)]
    picked = [ln for ln in lines if _MEANINGFUL.search(ln)] or lines
    out: list[str] = []
    for ln in reversed(picked):
        short = _shorten(ln.strip(), width)
        if short not in out:
            out.append(short)
        if len(out) == limit:
            break
    return list(reversed(out))


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
