"""domain/cron.expression_pattern, the grammar /openapi.json states for a schedule's `cron`, against the parser
it describes (cron.validate): what the pattern allows is accepted unless it never fires, and what it refuses
is refused. schemathesis found the schedule's `cron` documented as any string of 1-200 characters."""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spotreel.domain.cron import _LOWER_TO, _UPPER_TO, CronError, expression_pattern, validate
from tests.harness.hypothesis_profiles import examples

PATTERN = re.compile(expression_pattern())
# from_regex over a 25 KB pattern: hypothesis warns that the strategy's repr is large.
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")


def _accepted(expr: str) -> bool | None:
    """True, False, or None for an expression that parses but never fires (not in the grammar's reach)."""
    try:
        validate(expr)
        return True
    except CronError as err:
        return None if "never fires" in str(err) else False


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(expr=st.from_regex(PATTERN, fullmatch=True))
def test_what_the_pattern_allows_parses(expr):
    assert _accepted(expr) in (True, None), expr


FIELD = st.one_of(
    st.sampled_from(["*", "?", "L", "l", "0", "7", "8", "59", "60", "007", "1-5", "5-1", "3-3/2", "*/0", "*/15",
                     "MON-FRI", "mon#2", "MON#6", "ſun", "jan-mar", "Dec-Jan", "1,2", "1,,2", "H", "R/5", "31",
                     "0x1", "1/0", "24", "23", "13", "12", "L,1", "2#1", ""]),
    st.text(st.sampled_from("0123456789*?/,-#LlHMONmon"), max_size=6))
SEP = st.sampled_from([" ", "  ", "\t", "\u2003", "\x1c"])


@settings(max_examples=examples(400), deadline=None)
@given(fields=st.lists(FIELD, min_size=4, max_size=6), sep=SEP,
       macro=st.sampled_from([None, "@daily", "@DAILY", "@wee\u212aly", "@weekly ", " @hourly", "@dayly", "@"]))
def test_the_pattern_and_the_parser_agree(fields, sep, macro):
    expr = macro if macro is not None else sep.join(fields)
    accepted = _accepted(expr)
    if accepted is not None:
        assert bool(PATTERN.search(expr)) == accepted, expr


def test_the_case_and_space_tables_are_complete():
    """Every character str.upper() / str.lower() turns into an ASCII letter is in the pattern's classes, and
    the pattern's \\s is the whitespace str.split() splits on."""
    ups, lows = {}, {}
    for cp in range(sys.maxunicode + 1):
        c = chr(cp)
        if c.isascii():
            continue
        u, lo = c.upper(), c.lower()
        if len(u) == 1 and "A" <= u <= "Z":
            ups[u] = ups.get(u, "") + c
        if len(lo) == 1 and "a" <= lo <= "z":
            lows[lo] = lows.get(lo, "") + c
        assert c.isspace() == bool(re.fullmatch(r"\s", c)), hex(cp)
    assert ups == _UPPER_TO and lows == _LOWER_TO


def test_the_pattern_spaces_fields_with_the_whitespace_the_parser_splits_on_in_any_regex_dialect():
    # \s differs between ECMA-262 (JSON Schema) and Python: the pattern spells the parser's whitespace out.
    import re

    from spotreel.domain.cron import WHITESPACE, expression_pattern

    assert "\\s" not in expression_pattern()
    for code in range(0x10000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        ch = chr(code)
        assert bool(re.fullmatch(WHITESPACE, ch)) == ch.isspace(), hex(code)
        if ch.isspace():
            assert re.fullmatch(expression_pattern(), f"{ch}0{ch}0 * * *{ch}"), hex(code)
    assert not re.fullmatch(expression_pattern(), "\ufeff0 0 * * *")  # whitespace to ECMA-262 only: not parsed
