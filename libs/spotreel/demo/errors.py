"""The one exception the demo ends with: its message is the single line the user reads."""


class DemoError(Exception):
    """Something the user can act on: which part failed, why, and which log to read."""
