"""The services' row factory (platform.cql.named_rows): the driver's named tuples, each set of columns' class
made once instead of once per result."""

from __future__ import annotations

from cassandra.query import named_tuple_factory
from hypothesis import given
from hypothesis import strategies as st

from spotreel.platform import cql

names = st.lists(st.text(alphabet="abcxyz_[]0 -", min_size=1, max_size=8), min_size=1, max_size=5)


@given(names, st.integers(min_value=0, max_value=3))
def test_rows_equal_the_drivers_named_tuples(colnames, n):
    rows = [tuple(f"{i}-{j}" for j in range(len(colnames))) for i in range(n)]
    ours, theirs = cql.named_rows(colnames, rows), named_tuple_factory(colnames, rows)
    assert [tuple(r) for r in ours] == [tuple(r) for r in theirs]
    assert [r._fields for r in ours] == [r._fields for r in theirs]


def test_the_class_is_made_once_per_set_of_columns():
    a = cql.named_rows(["[applied]", "job_id"], [(True, "j1")])
    b = cql.named_rows(["[applied]", "job_id"], [(False, "j2")])
    assert type(a[0]) is type(b[0]) and a[0].applied is True and b[0].job_id == "j2"
    assert type(cql.named_rows(["job_id"], [("j",)])[0]) is not type(a[0])


def test_names_a_namedtuple_refuses_fall_back_as_the_drivers_do():
    row = cql.named_rows(["class", "def", "ok"], [(1, 2, 3)])[0]
    assert tuple(row) == (1, 2, 3) and row._fields == named_tuple_factory(["class", "def", "ok"], [(1, 2, 3)])[0]._fields


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(cql, "ROW_CLASSES_MAX", 3)
    monkeypatch.setattr(cql, "_row_classes", {})
    for i in range(10):
        assert cql.named_rows([f"c{i}"], [(i,)])[0][0] == i
        assert len(cql._row_classes) <= 3


def test_the_services_execution_profile_uses_it():
    from spotreel.config.settings import Settings

    assert cql.execution_profile(Settings()).row_factory is cql.named_rows
