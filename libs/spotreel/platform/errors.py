"""The one error type the infra CLI turns into a clear message instead of a traceback."""

from __future__ import annotations


class InfraError(Exception):
    """A failure a person can act on: one line that names the component and why, plus optional hints."""

    def __init__(self, message: str, hints: list[str] | tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.hints = [h for h in hints if h]

    def lines(self) -> list[str]:
        return [self.message, *(f"  {h}" for h in self.hints)]


class ProbeFailed(Exception):
    """A health probe got no proper answer; the text says what it saw (refused, timeout, wrong reply)."""
