"""Silence the Hugging Face libraries' chatter (progress bars, deprecation and optional-package notices)
around one call, so worker logs hold our lines; errors still raise."""

from __future__ import annotations

import warnings
from typing import Callable, TypeVar

T = TypeVar("T")


def quietly(fn: Callable[[], T]) -> T:
    from diffusers.utils import logging as dlog
    from transformers.utils import logging as tlog

    levels = dlog.get_verbosity(), tlog.get_verbosity()
    for lib in (dlog, tlog):
        lib.set_verbosity_error()
        lib.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return fn()
    finally:
        for lib, level in zip((dlog, tlog), levels):
            lib.set_verbosity(level)
            lib.enable_progress_bar()
