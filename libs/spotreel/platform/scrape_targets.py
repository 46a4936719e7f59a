"""Where a local Prometheus reads its file-based service discovery (one JSON file per scraped process).

A runtime process that serves /metrics on this machine (`spotreel worker --metrics-port`) announces itself
by writing a file here when the directory exists; the launcher's Prometheus (devstack/monitoring.py) makes
the directory and points `file_sd_configs` at it. The path is the launcher's layout (home/run/prometheus),
defined here so that runtime code finds it without importing the launcher.
"""

from __future__ import annotations

from pathlib import Path

from spotreel.config.settings import Settings


def targets_dir(settings: Settings) -> Path:
    return settings.home / "run" / "prometheus" / "targets"
