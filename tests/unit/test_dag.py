"""DAG submissions: validation errors, named cycles, topological order, readiness and cascades."""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from spotreel.domain.dag import (
    Action,
    DagError,
    DagLimits,
    DagNode,
    DagPolicy,
    Outcome,
    Readiness,
    descendants,
    readiness,
    resolve,
    validate,
)
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit


def n(node_id: str, *parents: str) -> DagNode:
    return DagNode(node_id, parents)


def problems(nodes, limits=None) -> list[tuple[str, tuple[str, ...]]]:
    with pytest.raises(DagError) as info:
        validate(nodes, limits)
    return [(p.code, p.nodes) for p in info.value.problems]


def test_valid_dag_has_topological_order_in_submission_order_where_free():
    dag = validate([n("render"), n("upscale", "render"), n("audio"), n("mux", "upscale", "audio")])
    assert dag.order == ("render", "upscale", "audio", "mux")
    assert dag.children["render"] == ("upscale",)
    assert dag.parents["mux"] == ("upscale", "audio")
    # Submission order need not be topological.
    assert validate([n("b", "a"), n("a")]).order == ("a", "b")


def test_cycle_is_named_in_edge_order():
    with pytest.raises(DagError) as info:
        validate([n("a", "c"), n("b", "a"), n("c", "b"), n("d", "c")])
    assert info.value.cycle == ("a", "b", "c")
    assert str(info.value) == "dependency cycle: 'a' -> 'b' -> 'c' -> 'a'"


def test_two_node_cycle_and_cycle_downstream_of_a_sound_part():
    assert problems([n("x"), n("p", "x", "q"), n("q", "p")]) == [("cycle", ("p", "q"))]


def test_self_loop_duplicate_unknown_and_duplicate_parent_are_all_reported():
    found = problems([n("a", "a"), n("b", "ghost"), n("b"), n("c", "b", "b")])
    assert found == [
        ("duplicate_id", ("b",)),
        ("self_loop", ("a",)),
        ("unknown_parent", ("b", "ghost")),
        ("duplicate_parent", ("c", "b")),
    ]


def test_error_messages_are_readable():
    with pytest.raises(DagError, match="node 'b' has unknown parent 'ghost'"):
        validate([n("b", "ghost")])
    with pytest.raises(DagError, match="lists itself as a parent"):
        validate([n("a", "a")])
    assert DagError([]).cycle is None


def test_size_limits():
    limits = DagLimits(max_nodes=3, max_parents=2, max_edges=2, max_id_length=5)
    assert problems([], limits) == [("empty", ())]
    assert problems([n(f"n{i}") for i in range(4)], limits) == [("too_many_nodes", ())]
    assert problems([n("a"), n("b"), n("c", "a", "b", "a")], limits) == [
        ("too_many_edges", ()), ("too_many_parents", ("c",))
    ]
    assert problems([n("toolong"), n("")], limits) == [("bad_id", ("toolong",)), ("bad_id", ("",))]
    with pytest.raises(DagError, match="4 nodes exceed the limit of 3"):
        validate([n(f"n{i}") for i in range(4)], limits)


def test_readiness_fail_fast():
    ff = DagPolicy.FAIL_FAST
    assert readiness((), {}, ff) == Readiness(Action.RUN)
    assert readiness(("a", "b"), {"a": Outcome.SUCCEEDED}, ff).action is Action.WAIT
    assert readiness(("a", "b"), {"a": Outcome.SUCCEEDED, "b": Outcome.SUCCEEDED}, ff).action is Action.RUN
    for bad in (Outcome.FAILED, Outcome.CANCELLED, Outcome.DEAD_LETTERED):
        # Cancelled at once, even while the other parent still runs; the reason names the parent.
        verdict = readiness(("a", "b"), {"b": bad}, ff)
        assert verdict == Readiness(Action.CANCEL, f"parent 'b' {bad.value}", "b")


def test_readiness_continue():
    assert readiness(("a", "b"), {"a": Outcome.FAILED}, "continue").action is Action.WAIT
    both_done = {"a": Outcome.FAILED, "b": Outcome.DEAD_LETTERED}
    assert readiness(("a", "b"), both_done, "continue").action is Action.RUN


def test_resolve_starts_roots_and_waits_for_the_rest():
    dag = validate([n("a"), n("b", "a"), n("c")])
    assert resolve(dag, {}, (), "fail_fast").run == ("a", "c")
    assert resolve(dag, {}, ("a", "c"), "fail_fast").run == ()
    assert resolve(dag, {"a": Outcome.SUCCEEDED}, ("a", "c"), "fail_fast").run == ("b",)


def test_resolve_fail_fast_cancels_the_whole_downstream_with_the_root_cause():
    dag = validate([n("a"), n("b", "a"), n("c", "b"), n("side")])
    res = resolve(dag, {"a": Outcome.FAILED}, ("a", "side"), DagPolicy.FAIL_FAST)
    assert res.run == ()
    assert res.cancel == (
        ("b", "parent 'a' failed"),
        ("c", "parent 'b' cancelled (root cause: 'a' failed)"),
    )
    assert resolve(dag, {"a": Outcome.FAILED}, ("a", "side"), "continue").run == ("b",)


def test_descendants_in_topological_order():
    dag = validate([n("a"), n("b", "a"), n("c", "a"), n("d", "b", "c"), n("e")])
    assert descendants(dag, "a") == ("b", "c", "d")
    assert descendants(dag, "d") == ()


# -- properties ---------------------------------------------------------------------------------------------


def _graph(order: list[int], parent_lists: list[list[int]]) -> list[DagNode]:
    # Self-loops and repeated parents are validation errors of their own; keep them out so that any
    # rejection here is a cycle.
    return [
        DagNode(f"n{node}", tuple(dict.fromkeys(f"n{p}" for p in parents if p != node)))
        for node, parents in zip(order, parent_lists)
    ]


graphs = st.integers(1, 9).flatmap(
    lambda size: st.builds(
        _graph,
        st.permutations(range(size)),
        st.lists(st.lists(st.integers(0, size - 1), max_size=3), min_size=size, max_size=size),
    )
)


def reachable(nodes):
    edges = {x.node_id: set() for x in nodes}
    for x in nodes:
        for p in x.parents:
            edges[p].add(x.node_id)
    closure = {}
    for start in edges:
        seen, stack = set(), list(edges[start])
        while stack:
            v = stack.pop()
            if v not in seen:
                seen.add(v)
                stack.extend(edges[v])
        closure[start] = seen
    return closure


@settings(max_examples=examples(1_000), deadline=None)
@given(nodes=graphs)
def test_cycle_found_iff_one_exists_and_is_real(nodes):
    has_cycle = any(v in reach for v, reach in reachable(nodes).items())
    event("cycle" if has_cycle else "acyclic")
    try:
        dag = validate(nodes)
    except DagError as err:
        assert has_cycle
        cycle = err.cycle
        assert cycle is not None and len(set(cycle)) == len(cycle) >= 2
        parents = {x.node_id: x.parents for x in nodes}
        for i, node in enumerate(cycle):
            # Each named node is a parent of the next, and the last closes the loop.
            assert node in parents[cycle[(i + 1) % len(cycle)]]
        return
    assert not has_cycle
    position = {node: i for i, node in enumerate(dag.order)}
    assert sorted(dag.order) == sorted(x.node_id for x in nodes)
    for x in nodes:
        for p in x.parents:
            assert position[p] < position[x.node_id]


@settings(max_examples=examples(500), deadline=None)
@given(nodes=graphs, data=st.data())
def test_resolve_never_runs_a_node_before_its_parents_finish(nodes, data):
    try:
        dag = validate(nodes)
    except DagError:
        return
    outcomes = data.draw(st.dictionaries(st.sampled_from(list(dag.order)), st.sampled_from(list(Outcome))))
    policy = data.draw(st.sampled_from(list(DagPolicy)))
    res = resolve(dag, outcomes, outcomes.keys(), policy)
    cancelled = {c for c, _ in res.cancel}
    assert not cancelled & set(res.run) and not (cancelled | set(res.run)) & set(outcomes)
    for node in res.run:
        assert all(p in outcomes for p in dag.parents[node])
        if policy is DagPolicy.FAIL_FAST:
            assert all(outcomes[p] is Outcome.SUCCEEDED for p in dag.parents[node])
    if policy is DagPolicy.CONTINUE:
        assert not cancelled
    for node, reason in res.cancel:
        # The blamed parent really is unsuccessful (or was cancelled in this same pass).
        blamed = reason.split("'")[1]
        assert blamed in dag.parents[node]
        assert outcomes.get(blamed, Outcome.CANCELLED) is not Outcome.SUCCEEDED


def test_an_id_repeated_many_times_is_one_problem_with_its_count():
    found = problems([n("a"), n("a"), n("a"), n("b"), n("b")])
    assert found == [("duplicate_id", ("a",)), ("duplicate_id", ("b",))]
    with pytest.raises(DagError) as info:
        validate([n("a"), n("a"), n("a")])
    assert str(info.value) == "node id 'a' is used 3 times"
