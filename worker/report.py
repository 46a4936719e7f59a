"""The worker's stdout: one JSON line per thing that happened, for operators, the demo and the tests."""

from __future__ import annotations

import json
import time
from typing import Any


def say(kind: str, **fields: Any) -> None:
    print(json.dumps({"at": round(time.time(), 3), "event": kind, **fields}, default=str), flush=True)
