"""AWS's EC2 instance metadata mock (amazon-ec2-metadata-mock), built from source and run on 127.0.0.1.

The worker's AWS notice reader is tested against it: IMDSv2 only (`-I`: a session token or 401), bound to
loopback (`-n 127.0.0.1`) on a port of ours (`-p`), in its `spot` mode, which serves the spot
interruption notice (instance-action) from `--mock-delay-sec` after its start and the rebalance
recommendation from `--rebalance-delay-sec`. Both delays count from the mock's start; a notice a test does
not want is put decades away. The instance-action's `time` is the request's time plus two minutes unless
`-t` pins it.

`ensure_built` runs `go install MODULE@VERSION` once per version into the cache dir
(cache_dir/go/ec2-metadata-mock-<version>/bin), with its module and build caches there too, and reuses it
after; `python -m spotreel.devstack.imds_mock build` does the same from a shell.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from spotreel.devstack.settings import launcher_settings
from spotreel.platform.errors import InfraError
from spotreel.config.settings import Settings

VERSION = "v1.13.0"
PACKAGE = "github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock"
BINARY = "ec2-metadata-mock"
GO_FALLBACK = Path("/usr/local/go/bin/go")  # where Go's own archive installs it
BUILD_TIMEOUT_S = 900
# A notice the test does not want: ten years after the mock's start (the delays are whole seconds).
NEVER_S = 10 * 365 * 86400
HEALTH_TIMEOUT_S = 20.0


def go_root(settings: Settings) -> Path:
    return settings.cache_dir / "go"


def binary_path(settings: Settings) -> Path:
    return go_root(settings) / f"{BINARY}-{VERSION}" / "bin" / BINARY


def _go(settings: Settings) -> str:
    name = launcher_settings(settings).go_bin
    found = shutil.which(name)
    if found is None and name == "go" and GO_FALLBACK.is_file():
        found = str(GO_FALLBACK)
    if found is None:
        raise InfraError(f"imds mock: Go not found ({name!r} is not on PATH, nor {GO_FALLBACK})",
                         ["install Go 1.23+ from https://go.dev/dl/ or set SPOTREEL_GO_BIN"])
    return found


def ensure_built(settings: Settings, say: Callable[[str], None] = print) -> Path:
    """The mock's binary, built with `go install` on first use (minutes: the module proxy and a compile)."""
    target = binary_path(settings)
    if target.is_file() and os.access(target, os.X_OK):
        return target
    root = go_root(settings)
    staging = target.parent.with_name("bin.partial")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
    except OSError as exc:
        raise InfraError(f"imds mock: cache directory {root} is not writable ({exc.strerror})",
                         ["set SPOTREEL_CACHE_DIR to a writable directory"]) from None
    # Module and build caches of our own, read-write so that clearing the cache dir never needs chmod.
    env = dict(os.environ, GOBIN=str(staging), GOPATH=str(root / "path"), GOMODCACHE=str(root / "path" / "pkg" / "mod"),
               GOCACHE=str(root / "build-cache"), GOFLAGS="-modcacherw", CGO_ENABLED="0")
    say(f"imds mock: go install {PACKAGE}@{VERSION}")
    began = time.monotonic()
    try:
        proc = subprocess.run([_go(settings), "install", f"{PACKAGE}@{VERSION}"], env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise InfraError(f"imds mock: go install did not finish within {BUILD_TIMEOUT_S} s", []) from None
    built = staging / BINARY
    if proc.returncode != 0 or not built.is_file():
        tail = proc.stdout.strip().splitlines()[-5:]
        raise InfraError(f"imds mock: go install {PACKAGE}@{VERSION} failed", tail or [f"exit {proc.returncode}"])
    shutil.rmtree(target.parent, ignore_errors=True)
    staging.replace(target.parent)
    say(f"imds mock: built {target} in {time.monotonic() - began:.0f} s")
    return target


@dataclass
class ImdsMock:
    """One mock process. `spot_after_s` / `rebalance_after_s`: seconds after its start that the spot
    interruption notice / the rebalance recommendation appear (None: never). `action`: terminate, stop or
    hibernate. `action_time`: the notice's RFC 3339 `time` (None: each request's time plus two minutes)."""

    binary: Path
    port: int
    workdir: Path
    spot_after_s: int | None = None
    rebalance_after_s: int | None = None
    action: str = "terminate"
    action_time: str | None = None
    host: str = "127.0.0.1"
    proc: subprocess.Popen | None = field(default=None, repr=False)
    started_at: float = 0.0  # epoch seconds the mock began counting its delays from (about)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / f"imds-mock-{self.port}.log"

    def argv(self) -> list[str]:
        spot = NEVER_S if self.spot_after_s is None else self.spot_after_s
        rebalance = NEVER_S if self.rebalance_after_s is None else self.rebalance_after_s
        return [str(self.binary), "spot", "-n", self.host, "-p", str(self.port), "-I",
                "--mock-delay-sec", str(spot), "--rebalance-delay-sec", str(rebalance), "--action", self.action,
                *(("--time", self.action_time) if self.action_time else ())]

    def start(self) -> "ImdsMock":
        self.workdir.mkdir(parents=True, exist_ok=True)
        # HOME is the mock's: it reads $HOME/aemm-config.json when there is one, which must not be a user's.
        env = dict(os.environ, HOME=str(self.workdir))
        with open(self.log, "ab") as out:
            self.started_at = time.time()
            self.proc = subprocess.Popen(self.argv(), cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_healthy()
        return self

    def wait_healthy(self, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
        """Until the mock hands out an IMDSv2 token, or InfraError with its log's end."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise InfraError(f"imds mock exited with {self.proc.returncode}", self.log_tail())
            if self.token(1) is not None:
                return
            time.sleep(0.1)
        raise InfraError(f"imds mock did not answer on {self.url} within {timeout_s:.0f} s", self.log_tail())

    def token(self, ttl_s: int = 60) -> str | None:
        req = urllib.request.Request(f"{self.url}/latest/api/token", data=b"", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": str(ttl_s)})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=2) as resp:
                return resp.read().decode().strip() or None
        except (urllib.error.URLError, OSError):
            return None

    def log_tail(self, lines: int = 8) -> list[str]:
        try:
            return self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return [f"no log at {self.log}"]

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> "ImdsMock":
        return self.start() if self.proc is None else self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    if argv[1:] != ["build"]:
        print("usage: python -m spotreel.devstack.imds_mock build", file=sys.stderr)
        return 2
    from spotreel.devstack.settings import DevstackSettings

    try:
        print(ensure_built(DevstackSettings.from_env()))
    except InfraError as exc:
        print(f"{exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
