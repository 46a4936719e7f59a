"""The JVM both Kafka and Cassandra run on, and the options every one of our JVMs shares."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from spotreel.platform.errors import InfraError
from spotreel.devstack.settings import launcher_settings
from spotreel.config.settings import Settings


def java_bin(settings: Settings, component: str) -> str:
    settings = launcher_settings(settings)
    found = shutil.which(settings.java_bin)
    # JAVA_HOME only stands in for the default name; an explicit SPOTREEL_JAVA_BIN must exist itself.
    if found is None and settings.java_bin == "java" and "JAVA_HOME" in os.environ:
        candidate = Path(os.environ["JAVA_HOME"]) / "bin" / "java"
        found = str(candidate) if candidate.is_file() else None
    if found is None:
        raise InfraError(f"{component}: Java not found ({settings.java_bin!r} is not on PATH)",
                         ["install Java 17 (Debian: apt-get install openjdk-17-jre-headless) "
                          "or set SPOTREEL_JAVA_BIN"])
    return found


def common_jvm_options(settings: Settings, logs_dir: Path, tmp_dir: Path) -> list[str]:
    settings = launcher_settings(settings)
    return [
        # C1 only (`jvm_fast_start`, whose comment says when): no C2 compiler CPU in a server's first minutes,
        # slower hot code for good (docs/decisions/0009-jvms-compile-with-c2.md).
        *(["-XX:TieredStopAtLevel=1"] if settings.jvm_fast_start else []),
        *settings.jvm_extra_opts.split(),
        "-Djava.awt.headless=true",
        # No hsperfdata files in /tmp: all our state stays under SPOTREEL_HOME.
        "-XX:+PerfDisableSharedMem",
        f"-XX:ErrorFile={logs_dir / 'hs_err_pid%p.log'}",
        # lz4, snappy and zstd unpack their native libraries into the temp dir: keep those with us too.
        f"-Djava.io.tmpdir={tmp_dir}",
        "-XX:+ExitOnOutOfMemoryError",
    ]
