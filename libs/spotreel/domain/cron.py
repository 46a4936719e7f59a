"""Cron schedules: validation, next occurrence, and what to fire after a gap.

Times are UTC epoch milliseconds in and out; expressions are the classic five fields (minute hour
day-of-month month day-of-week, with croniter's usual day-of-month OR day-of-week rule) or one of
``@yearly @annually @monthly @weekly @daily @midnight @hourly``. Occurrences fall on whole minutes.

croniter's hashed (``H``) and random (``R``) fields are refused: a schedule must produce the same
occurrences on every replay and on every partition owner.

A scheduler keeps ``last_ms`` per schedule (the ``now_ms`` of its previous tick, or the creation time) and
calls ``CronSchedule.tick(last_ms, now_ms, ...)`` whenever its run-at timer fires or it takes a partition
over. The window is ``(last_ms, now_ms]``; then it stores ``last_ms = now_ms`` and sets its timer to
``next_ms``. Every fired occurrence becomes one job whose id is ``occurrence_id(schedule_id, occurrence)``,
so a tick that is replayed after a crash creates nothing new.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import StrEnum

from croniter import CroniterBadDateError, croniter

# uuid5(NAMESPACE_URL, "https://spotreel.invalid/ns/cron-occurrence"); a literal so it can never drift.
OCCURRENCE_NAMESPACE = uuid.UUID("02d1b278-2c0f-552e-ba72-36e12196f4ef")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)
_SECOND_MS = 1000
_MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_NONDETERMINISTIC = re.compile(r"^[hr](\(\d+-\d+\))?(/\d+)?$", re.IGNORECASE)
# Any start works to prove that an expression can fire at all; a fixed one keeps validation replayable.
_PROBE = datetime(2000, 1, 1, tzinfo=timezone.utc)


class CronError(ValueError):
    pass


class MissedPolicy(StrEnum):
    SKIP = "skip"
    RUN_ONCE = "run_once"
    RUN_ALL = "run_all"


def validate(expr: str) -> str:
    """The normalized expression (trimmed, single spaces, macros lower-cased), or CronError saying why not."""
    if not isinstance(expr, str) or not expr.strip():
        raise CronError("cron expression is empty")
    fields = expr.split()
    if len(fields) == 1 and fields[0].startswith("@"):
        macro = fields[0].lower()
        if macro not in _MACROS:
            raise CronError(f"unknown cron macro {fields[0]!r}; expected one of {', '.join(sorted(_MACROS))}")
        return macro
    if len(fields) != len(_FIELDS):
        raise CronError(
            f"cron expression {expr!r} has {len(fields)} fields; expected 5 ({' '.join(_FIELDS)})"
        )
    for name, value in zip(_FIELDS, fields):
        if _NONDETERMINISTIC.match(value):
            raise CronError(
                f"{name} field {value!r} is a hashed/random field; schedules must be deterministic"
            )
    normalized = " ".join(fields)
    try:
        croniter(normalized, _PROBE).get_next(datetime)
    except CroniterBadDateError:
        raise CronError(f"cron expression {expr!r} never fires (no such date)") from None
    except (ValueError, KeyError, TypeError) as err:  # croniter raises all three for malformed fields
        raise CronError(f"invalid cron expression {expr!r}: {err}") from None
    return normalized


def _to_dt(ms: int) -> datetime:
    return _EPOCH + ms * _MS


def _to_ms(moment: datetime) -> int:
    return (moment - _EPOCH) // _MS


def occurrence_id(schedule_id: str, occurrence_ms: int) -> str:
    """Stable id for one occurrence: uuid5(OCCURRENCE_NAMESPACE, f"{schedule_id}@{occurrence_ms}")."""
    return str(uuid.uuid5(OCCURRENCE_NAMESPACE, f"{schedule_id}@{occurrence_ms}"))


@dataclass(frozen=True)
class CronTick:
    fire: tuple[int, ...]
    next_ms: int
    dropped: bool


@dataclass(frozen=True)
class CronSchedule:
    expr: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "expr", validate(self.expr))

    # Occurrences are whole minutes, so comparing against the containing whole second is exact and
    # keeps croniter away from sub-second start times.
    def next_after(self, after_ms: int) -> int:
        """The first occurrence strictly after ``after_ms``."""
        start = _to_dt(after_ms // _SECOND_MS * _SECOND_MS)
        return _to_ms(croniter(self.expr, start).get_next(datetime))

    def _backwards_from(self, at_ms: int) -> croniter:
        return croniter(self.expr, _to_dt(at_ms // _SECOND_MS * _SECOND_MS + _SECOND_MS))

    def latest_at_or_before(self, at_ms: int) -> int:
        return _to_ms(self._backwards_from(at_ms).get_prev(datetime))

    def recent(self, after_ms: int, until_ms: int, limit: int) -> tuple[tuple[int, ...], bool]:
        """Up to ``limit`` of the latest occurrences in ``(after_ms, until_ms]``, ascending, and whether
        older ones in the window were left out. Costs O(limit), however long the window."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        found: list[int] = []
        if until_ms <= after_ms:
            return (), False
        walk = self._backwards_from(until_ms)
        while True:
            moment = _to_ms(walk.get_prev(datetime))
            if moment <= after_ms:
                return tuple(reversed(found)), False
            if len(found) == limit:
                return tuple(reversed(found)), True
            found.append(moment)

    def tick(
        self,
        last_ms: int,
        now_ms: int,
        policy: MissedPolicy | str,
        grace_ms: int = 60_000,
        max_catch_up: int = 100,
    ) -> CronTick:
        """What to fire for the window ``(last_ms, now_ms]``.

        The latest occurrence in the window is *on time* if ``now_ms - latest <= grace_ms``; every other
        occurrence in it was missed (the scheduler was down, partitions moved, the timer ran late).

        * ``skip``: fire the latest only if on time; never a missed one.
        * ``run_once``: fire exactly one, the latest, if the window holds any (missed runs coalesce).
        * ``run_all``: fire every occurrence in the window, but at most ``max_catch_up`` of them, the
          most recent ones, in ascending order.

        ``dropped`` says that the window held occurrences that are not in ``fire``.
        """
        policy = MissedPolicy(policy)
        if grace_ms < 0:
            raise ValueError(f"grace_ms must be >= 0, got {grace_ms}")
        if max_catch_up < 1:
            raise ValueError(f"max_catch_up must be >= 1, got {max_catch_up}")
        next_ms = self.next_after(now_ms)
        if policy is MissedPolicy.RUN_ALL:
            fire, dropped = self.recent(last_ms, now_ms, max_catch_up)
            return CronTick(fire, next_ms, dropped)
        window, more = self.recent(last_ms, now_ms, 1)
        if not window:
            return CronTick((), next_ms, False)
        if policy is MissedPolicy.SKIP and now_ms - window[0] > grace_ms:
            return CronTick((), next_ms, True)
        return CronTick(window, next_ms, more)
