"""The hypothesis profiles of the suite, chosen by HYPOTHESIS_PROFILE (loaded by tests/conftest.py).

- `ci`, the default when CI is set: a quarter of the examples (50 where a test does not say), no deadline
  (a busy 2-core machine makes per-example deadlines flaky), and the failing example's blob printed so that
  `@reproduce_failure` replays it;
- `dev`, the default otherwise: hypothesis's own 100 examples, or what a test asks for, without a deadline;
- `deep`, on demand (`HYPOTHESIS_PROFILE=deep make test-unit`): ten times the examples, for a long search.

A test that asks for more than the default writes `max_examples=examples(N)`: N under `dev`, scaled by the
profile otherwise, so the CI run stays short and the deep one searches further.
"""

from __future__ import annotations

import os

from hypothesis import settings

_SCALE = {"ci": 0.25, "dev": 1.0, "deep": 10.0}
_DEFAULT_EXAMPLES = 100


def chosen() -> str:
    name = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
    if name not in _SCALE:
        raise ValueError(f"HYPOTHESIS_PROFILE={name!r}: one of {', '.join(_SCALE)}")
    return name


def examples(n: int, profile: str | None = None) -> int:
    """`n` examples as the profile (the chosen one by default) scales them, never fewer than 10."""
    return max(10, round(n * _SCALE[profile or chosen()]))


def load() -> str:
    """Register the profiles and load the chosen one; returns its name."""
    for name in _SCALE:
        settings.register_profile(name, max_examples=examples(_DEFAULT_EXAMPLES, name), deadline=None,
                                  print_blob=name == "ci")
    name = chosen()
    settings.load_profile(name)
    return name
