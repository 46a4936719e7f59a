"""Where each component keeps its files: everything under one home directory (data/, logs/, run/)."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from spotreel.platform.errors import InfraError
from spotreel.config.settings import Settings


@dataclass(frozen=True)
class Layout:
    home: Path

    @classmethod
    def of(cls, settings: Settings) -> "Layout":
        return cls(settings.home)

    @property
    def data_root(self) -> Path:
        return self.home / "data"

    @property
    def logs_root(self) -> Path:
        return self.home / "logs"

    @property
    def run_root(self) -> Path:
        return self.home / "run"

    def data(self, component: str) -> Path:
        return self.data_root / component

    def logs(self, component: str) -> Path:
        return self.logs_root / component

    def conf(self, component: str) -> Path:
        # Generated configs are rewritten on every start, so they live with the run-time state.
        return self.run_root / component

    def pidfile(self, component: str) -> Path:
        return self.run_root / f"{component}.pid"

    @property
    def lockfile(self) -> Path:
        return self.run_root / "infra.lock"

    def ensure_writable(self) -> None:
        """Create the tree and prove we can write into it, before any server is started."""
        for d in (self.home, self.data_root, self.logs_root, self.run_root):
            try:
                d.mkdir(parents=True, exist_ok=True)
                probe = d / f".write-test-{os.getpid()}"
                probe.write_bytes(b"")
                probe.unlink()
            except OSError as exc:
                reason = exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc))
                raise InfraError(
                    f"home directory {self.home} is not writable ({d}: {reason})",
                    [f"set SPOTREEL_HOME to a writable directory (now {self.home})"],
                ) from None
