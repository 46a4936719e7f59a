"""What the benchmarks say about the machine they ran on (bench/ is no package: scripts import this from their
own folder)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_line() -> str:
    """"<model name>, <n> cores"."""
    return f"{cpu_name()}, {os.cpu_count()} cores"
