"""Cron schedules: validation, next occurrence, and what to fire after a gap.

Times are UTC epoch milliseconds in and out; occurrences fall on whole minutes. Expressions are the classic
five fields (minute hour day-of-month month day-of-week) or one of ``@yearly @annually @monthly @weekly
@daily @midnight @hourly``. Each field is a list of ``*``, ``N``, ``A-B`` (A <= B), optionally ``/STEP``;
``N/STEP`` means N to the field's maximum. Month and weekday names (JAN, MON) and 7 for Sunday are
accepted; ``?`` means ``*`` in the day fields. Two extras are accepted alone in their field while the other
day field is ``*``: ``L`` (last day of the month) as day-of-month, ``D#K`` (K-th weekday D of the month) as
day-of-week. Day-of-month and day-of-week combine with OR when both are restricted (allow fewer than all
values), else with AND, as in classic cron.

The fields are parsed here, not by croniter: croniter 5.0.1 reads a one-value range such as ``3-3`` as
``*`` and gets ``3-3/2`` wrong, which would turn "03:00 daily" into "every minute". croniter only ever
sees explicit value lists. Hashed (``H``) and random (``R``) fields are refused: a schedule must produce
the same occurrences on every replay and on every partition owner.

A scheduler keeps ``last_ms`` per schedule (the ``now_ms`` of its previous tick, or the creation time) and
calls ``CronSchedule.tick(last_ms, now_ms, ...)`` whenever its run-at timer fires or it takes a partition
over. The window is ``(last_ms, now_ms]``; then it stores ``last_ms = now_ms`` and sets its timer to
``next_ms``. Every fired occurrence becomes one job with an id derived from (schedule, occurrence), e.g.
``occurrence_id``, so a tick that is replayed after a crash creates nothing new.

Time zones. ``CronSchedule(expr, tz)`` reads the expression as wall-clock time in the IANA zone ``tz``
(default UTC); occurrences are still UTC epoch milliseconds. The wall-clock times the expression names are
mapped to instants like this, which makes the occurrences strictly increasing and never fires one local
time twice:

* a local time that exists once is that instant;
* a local time in a spring-forward gap (it does not exist, e.g. 02:30 on the night clocks go from 02:00 to
  03:00) runs at the first instant after the gap (03:00 new time), once: every named time inside one gap,
  and a named time at the gap's end, are the same occurrence;
* a local time in a fall-back overlap (it exists twice, e.g. 01:30 when clocks go from 02:00 back to
  01:00) runs once, at its first occurrence (the earlier offset); the repeated hour names nothing new.

The zone rules are those of the host's tz database (``zoneinfo``); a name it does not list is refused.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from functools import lru_cache
from typing import Iterator
from zoneinfo import ZoneInfo, available_timezones

from croniter import CroniterBadDateError, croniter

# uuid5(NAMESPACE_URL, "https://spotreel.invalid/ns/cron-occurrence"); a literal so it can never drift.
OCCURRENCE_NAMESPACE = uuid.UUID("02d1b278-2c0f-552e-ba72-36e12196f4ef")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)
_SECOND_MS = 1000
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NAMES: tuple[dict[str, int], ...] = ({}, {}, {}, {n: i + 1 for i, n in enumerate(_MONTHS)}, {n: i for i, n in enumerate(_DAYS)})
_ITEM = re.compile(r"^(?:(\*)|([0-9A-Z]+)(?:-([0-9A-Z]+))?)(?:/([0-9]+))?$")
_HASHED = re.compile(r"^[HR](\(|/|$)")
_NTH = re.compile(r"^([0-9A-Z]+)#([1-5])$")
_DOM, _DOW = 2, 4
# Any start works to prove that an expression can fire at all; a fixed one keeps validation replayable.
_PROBE = datetime(2000, 1, 1, tzinfo=timezone.utc)


class CronError(ValueError):
    pass


UTC_NAME = "UTC"
# Enough to walk past any one-day calendar jump (Pacific/Apia skipped 2011-12-30) minute by minute.
_MAX_WALK = 3000


# Names some hosts' tz databases list that are not zones of their own (the host's zone, rule templates).
_NOT_ZONES = ("localtime", "posixrules", "Factory")


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(n for n in available_timezones()
                     if n not in _NOT_ZONES and not n.startswith(("posix/", "right/")))


def zone_names() -> tuple[str, ...]:
    """Every name ``zone`` accepts, sorted (the gateway's OpenAPI document lists them)."""
    return tuple(sorted(_zone_names()))


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``, or CronError if the tz database has no such zone."""
    if not isinstance(name, str) or name not in _zone_names():
        raise CronError(f"unknown time zone {name!r}; expected an IANA name such as Europe/Paris or UTC")
    return ZoneInfo(name)


def validate_zone(name: str) -> str:
    # Checked before the cached lookup: lru_cache hashes its argument, and a JSON object ({}) is unhashable,
    # a TypeError (a 500 at the gateway, found by schemathesis) instead of CronError.
    if not isinstance(name, str):
        raise CronError(f"time zone must be a string such as Europe/Paris or UTC; got {type(name).__name__}")
    zone(name)
    return name


class MissedPolicy(StrEnum):
    SKIP = "skip"
    RUN_ONCE = "run_once"
    RUN_ALL = "run_all"


def _value(index: int, token: str) -> int:
    lo, hi = _BOUNDS[index]
    number = _NAMES[index].get(token)
    if number is None:
        if not token.isdigit():
            raise CronError(f"{_FIELDS[index]} value {token!r} is not a number or name")
        number = int(token)
    if not lo <= number <= hi:
        raise CronError(f"{_FIELDS[index]} value {token} is outside {lo}-{hi}")
    return number


def _values(index: int, text: str) -> set[int]:
    lo, hi = _BOUNDS[index]
    allowed: set[int] = set()
    for item in text.split(","):
        if _HASHED.match(item):
            raise CronError(f"{_FIELDS[index]} item {item!r} is hashed/random; schedules must be deterministic")
        match = _ITEM.match(item)
        if match is None:
            raise CronError(f"{_FIELDS[index]} item {item!r} is not of the form *, N, A-B, */S, N/S or A-B/S")
        star, first, last, step = match.groups()
        if star:
            start, stop = lo, hi
        else:
            start = _value(index, first)
            # "N/S" runs from N to the end of the field, as in Vixie cron.
            stop = _value(index, last) if last else hi if step else start
        if start > stop:
            raise CronError(f"{_FIELDS[index]} range {item!r} runs backwards")
        if step is not None and int(step) == 0:
            raise CronError(f"{_FIELDS[index]} step in {item!r} must be at least 1")
        allowed.update(range(start, stop + 1, int(step or 1)))
    if index == _DOW and 7 in allowed:
        allowed = (allowed - {7}) | {0}
    return allowed


def _canonical(fields: list[str]) -> str:
    """The expression as croniter should see it: explicit sorted values, or * for a full field."""
    out = []
    for index, text in enumerate(fields):
        if index in (_DOM, _DOW) and text == "?":
            text = "*"
        if index == _DOM and text == "L" or index == _DOW and _NTH.match(text):
            other = fields[_DOW if index == _DOM else _DOM]
            if other not in ("*", "?"):
                raise CronError(f"{_FIELDS[index]} {text!r} needs the other day field to be *")
            if index == _DOW:
                day, nth = _NTH.match(text).groups()  # type: ignore[union-attr]
                text = f"{_value(_DOW, day) % 7}#{nth}"
            out.append(text)
            continue
        lo, hi = _BOUNDS[index]
        allowed = _values(index, text)
        full = set(range(lo, 7 if index == _DOW else hi + 1))
        out.append("*" if allowed == full else ",".join(map(str, sorted(allowed))))
    return " ".join(out)


def _parse(expr: str) -> tuple[str, str]:
    """(normalized text, canonical croniter expression), or CronError saying why not."""
    if not isinstance(expr, str) or not expr.strip():
        raise CronError("cron expression is empty")
    fields = expr.split()
    if len(fields) == 1 and fields[0].startswith("@"):
        macro = fields[0].lower()
        if macro not in _MACROS:
            raise CronError(f"unknown cron macro {fields[0]!r}; expected one of {', '.join(sorted(_MACROS))}")
        return macro, _MACROS[macro]
    if len(fields) != len(_FIELDS):
        raise CronError(
            f"cron expression {expr!r} has {len(fields)} fields; expected 5 ({' '.join(_FIELDS)})"
        )
    try:
        canonical = _canonical([f.upper() for f in fields])
    except CronError as err:
        raise CronError(f"invalid cron expression {expr!r}: {err}") from None
    try:
        croniter(canonical, _PROBE).get_next(datetime)
    except CroniterBadDateError:
        raise CronError(f"cron expression {expr!r} never fires (no such date)") from None
    return " ".join(fields), canonical


# Characters other than the ASCII letter itself that str.upper() (field names) or str.lower() (macros) turn
# into it: "ſun" is SUN to _parse, "@wee\u212aly" (Kelvin sign) is @weekly. A unit test scans every code point.
_UPPER_TO = {"I": "\u0131", "S": "\u017f"}
_LOWER_TO = {"k": "\u212a"}


def _spelled(word: str, lower: bool) -> str:
    out = []
    for ch in word:
        up, low = ch.upper(), ch.lower()
        extra = _LOWER_TO.get(low, "") if lower else _UPPER_TO.get(up, "")
        out.append(f"[{up}{low}{extra}]" if up != low else re.escape(ch))
    return "".join(out)


def _digits(a: str, b: str) -> str:
    """Decimal numbers from a to b, both of the same length, without leading zeros beyond that length."""
    if not a:
        return ""
    if a == b:
        return re.escape(a)
    if a[0] == b[0]:
        return f"{a[0]}(?:{_digits(a[1:], b[1:])})"
    n = len(a) - 1
    parts = [a[0] + f"(?:{_digits(a[1:], '9' * n)})" if n else a[0]]
    if int(b[0]) - int(a[0]) > 1:
        inner = f"[{int(a[0]) + 1}-{int(b[0]) - 1}]"
        parts.append(inner + "[0-9]" * n)
    parts.append(b[0] + f"(?:{_digits('0' * n, b[1:])})" if n else b[0])
    return "|".join(parts)


def _number_pattern(lo: int, hi: int) -> str:
    """Decimal spellings of lo..hi, leading zeros allowed (int("007") is 7)."""
    if lo > hi:
        return "(?!)"
    parts = []
    for width in range(len(str(lo)), len(str(hi)) + 1):
        a, b = max(lo, 10 ** (width - 1) if width > 1 else 0), min(hi, 10 ** width - 1)
        if a <= b:
            parts.append(_digits(str(a), str(b)))
    return "0*(?:" + "|".join(parts) + ")"


def _value_pattern(index: int, first: int, last: int) -> str:
    """One value of field `index` from first to last: a number or a name (any case)."""
    names = [_spelled(n, lower=False) for n, v in _NAMES[index].items() if first <= v <= last]
    return "(?:" + "|".join([_number_pattern(first, last), *names]) + ")"


def _field_pattern(index: int) -> str:
    """A list of items *, N, A-B (A <= B), each optionally /STEP (STEP >= 1), as _values takes them."""
    lo, hi = _BOUNDS[index]

    def spell(first: int, last: int) -> str:
        return _value_pattern(index, first, last)

    ranges = "|".join(f"{spell(a, a)}-{spell(a, hi)}" for a in range(lo, hi + 1))
    item = f"(?:\\*|{spell(lo, hi)}|{ranges})(?:/0*[1-9][0-9]*)?"
    return f"{item}(?:,{item})*"


# The whitespace str.split() and str.strip() go by, spelled out as a character class: `\\s` means other
# characters to an ECMA-262 (JSON Schema) regex than to Python's (U+001C..U+001F and U+0085 are whitespace to
# Python only, U+FEFF to ECMA-262 only), so a pattern for a JSON Schema names them one by one.
WHITESPACE = "[" + "".join(f"\\u{ord(ch):04x}" for ch in map(chr, range(0x3001)) if ch.isspace()) + "]"


@lru_cache(maxsize=1)
def expression_pattern() -> str:
    """A regular expression (the same in Python's re and in ECMA-262: WHITESPACE, not \\s) for the
    expressions _parse accepts, for the gateway's OpenAPI document. It is their grammar: five fields of values
    within bounds, names, ranges that run forward, non-zero steps, ? in a day field, L alone as
    day-of-month and D#K alone as day-of-week while the other day field is * or ?, or a macro; spacing and
    case as _parse reads them. Not in it: an expression that never fires (``0 0 30 2 *``), which only a
    calendar can tell."""
    minute, hour, dom, month, dow = (_field_pattern(i) for i in range(len(_FIELDS)))
    day = f"(?:{_spelled('L', lower=False)})"
    nth = f"(?:{_value_pattern(_DOW, *_BOUNDS[_DOW])}#[1-5])"
    star = "(?:\\*|\\?)"
    ws = WHITESPACE
    days = (f"(?:{day}{ws}+(?:{month}){ws}+{star}|{star}{ws}+(?:{month}){ws}+{nth}"
            f"|(?:\\?|{dom}){ws}+(?:{month}){ws}+(?:\\?|{dow}))")
    macros = "|".join(_spelled(m[1:], lower=True) for m in _MACROS)
    return f"^{ws}*(?:@(?:{macros})|(?:{minute}){ws}+(?:{hour}){ws}+{days}){ws}*$"


def validate(expr: str) -> str:
    """The normalized expression (trimmed, single spaces, macros lower-cased), or CronError saying why not."""
    return _parse(expr)[0]


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


def _offset_s(zone_: ZoneInfo, second: int) -> timedelta | None:
    return datetime.fromtimestamp(second, tz=timezone.utc).astimezone(zone_).utcoffset()


def local_instant(naive: datetime, zone_: ZoneInfo) -> int:
    """The UTC epoch ms at which the wall-clock time ``naive`` of ``zone_`` occurs, by the rules in the
    module doc: the first of two in an overlap, the first instant after the gap for a time in a gap."""
    first = naive.replace(tzinfo=zone_, fold=0)
    at = first.astimezone(timezone.utc)
    if at.astimezone(zone_).replace(tzinfo=None) == naive:
        return _to_ms(at)
    # In a gap (PEP 495): fold=0 maps with the offset before the transition, landing after it, and fold=1
    # with the offset after, landing before it. The transition is the first second with the later offset.
    lo = _to_ms(naive.replace(tzinfo=zone_, fold=1).astimezone(timezone.utc)) // _SECOND_MS
    hi = _to_ms(at) // _SECOND_MS
    after = _offset_s(zone_, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset_s(zone_, mid) == after:
            hi = mid
        else:
            lo = mid
    return hi * _SECOND_MS


def _local_naive(ms: int, zone_: ZoneInfo) -> datetime:
    return _to_dt(ms).astimezone(zone_).replace(tzinfo=None)


@dataclass(frozen=True)
class CronSchedule:
    expr: str
    tz: str = UTC_NAME
    _canonical: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        normalized, canonical = _parse(self.expr)
        object.__setattr__(self, "expr", normalized)
        object.__setattr__(self, "_canonical", canonical)
        zone(self.tz)

    @property
    def _utc(self) -> bool:
        return self.tz == UTC_NAME

    # Local-time walks. The map from wall-clock time to instant (local_instant) never decreases as the
    # wall-clock time grows, so walking the expression's wall-clock times forward (backward) from the right
    # start and dropping what is not strictly later (earlier) than the last instant yields the occurrences
    # in order, each once.
    def _forward(self, after_ms: int) -> Iterator[int]:
        zone_ = zone(self.tz)
        # Every wall-clock time before local(after) maps at or before after_ms.
        walk = croniter(self._canonical, _local_naive(after_ms // _SECOND_MS * _SECOND_MS, zone_) - timedelta(seconds=1))
        last = after_ms
        for _ in range(_MAX_WALK):
            moment = local_instant(walk.get_next(datetime), zone_)
            if moment > last:
                last = moment
                yield moment
        raise CronError(f"cron expression {self.expr!r} in {self.tz} found no next occurrence")

    def _backward(self, at_ms: int) -> Iterator[int]:
        zone_ = zone(self.tz)
        here = _to_dt(at_ms // _SECOND_MS * _SECOND_MS).astimezone(zone_)
        start = here.replace(tzinfo=None) + timedelta(seconds=1)
        if here.fold:  # in an overlap's second pass: its wall-clock times until the overlap's end map earlier
            start += here.replace(fold=0).utcoffset() - here.utcoffset()  # type: ignore[operator]
        walk = croniter(self._canonical, start)
        last = at_ms + 1
        for _ in range(_MAX_WALK):
            moment = local_instant(walk.get_prev(datetime), zone_)
            if moment < last:
                last = moment
                yield moment
        raise CronError(f"cron expression {self.expr!r} in {self.tz} found no earlier occurrence")

    # Occurrences are whole minutes, so comparing against the containing whole second is exact and
    # keeps croniter away from sub-second start times.
    def next_after(self, after_ms: int) -> int:
        """The first occurrence strictly after ``after_ms``."""
        if not self._utc:
            return next(self._forward(after_ms))
        start = _to_dt(after_ms // _SECOND_MS * _SECOND_MS)
        return _to_ms(croniter(self._canonical, start).get_next(datetime))

    def _backwards_from(self, at_ms: int) -> croniter:
        return croniter(self._canonical, _to_dt(at_ms // _SECOND_MS * _SECOND_MS + _SECOND_MS))

    def _descending(self, at_ms: int) -> Iterator[int]:
        """Occurrences at or before ``at_ms``, latest first."""
        if not self._utc:
            yield from self._backward(at_ms)
            return
        walk = self._backwards_from(at_ms)
        while True:
            yield _to_ms(walk.get_prev(datetime))

    def latest_at_or_before(self, at_ms: int) -> int:
        return next(self._descending(at_ms))

    def between(self, after_ms: int, until_ms: int, limit: int) -> tuple[int, ...]:
        """Up to ``limit`` occurrences in ``(after_ms, until_ms]``, ascending, the earliest first."""
        out: list[int] = []
        moment = after_ms
        while len(out) < limit:
            moment = self.next_after(moment)
            if moment > until_ms:
                break
            out.append(moment)
        return tuple(out)

    def recent(self, after_ms: int, until_ms: int, limit: int) -> tuple[tuple[int, ...], bool]:
        """Up to ``limit`` of the latest occurrences in ``(after_ms, until_ms]``, ascending, and whether
        older ones in the window were left out. Costs O(limit), however long the window."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        found: list[int] = []
        if until_ms <= after_ms:
            return (), False
        walk = self._descending(until_ms)
        while True:
            moment = next(walk)
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
