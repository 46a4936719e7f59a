"""The preemption waste model: segments, the exact expectation, the interval math and the Monte-Carlo."""

from __future__ import annotations

import math

import pytest

from spotreel.fleetsim.waste import (JobModel, WasteTally, adaptive_interval_s, expected_waste_s,
                                                  expected_wall_s, interval_steps, monte_carlo,
                                                  optimal_interval_by_formula, segments, young_daly_interval_s)

JOB = JobModel(work_s=600.0, step_s=10.0, checkpoint_cost_s=5.0, restart_s=30.0)


def test_segments_carry_checkpoints_except_the_last():
    assert segments(JOB, None) == [600.0]
    assert segments(JOB, 100.0) == [105.0] * 5 + [100.0]
    # 60 steps every 7: eight full segments with checkpoints, then 4 steps that end the job.
    assert segments(JOB, 70.0) == [75.0] * 8 + [40.0]
    assert sum(segments(JOB, 70.0)) == 600.0 + 8 * 5.0


def test_interval_rounds_up_to_a_step_boundary():
    assert interval_steps(JOB, 30.0) == 3
    assert interval_steps(JOB, 31.0) == 4
    assert interval_steps(JOB, 1.0) == 1
    assert interval_steps(JOB, None) is None
    with pytest.raises(ValueError):
        interval_steps(JOB, 0.0)


def test_expected_waste_matches_hand_computed_daly_formula():
    m, r = 900.0, 30.0
    want = (5 * m * math.exp(r / m) * (math.exp(105.0 / m) - 1)
            + m * math.exp(r / m) * (math.exp(100.0 / m) - 1)) - 600.0
    assert expected_waste_s(JOB, 100.0, m) == pytest.approx(want, rel=1e-12)
    # Rare preemptions: the waste tends to the checkpoint overhead alone.
    assert expected_waste_s(JOB, 100.0, 1e12) == pytest.approx(5 * 5.0, rel=1e-6)
    assert expected_waste_s(JOB, None, 1e12) == pytest.approx(0.0, abs=1e-6)
    assert expected_wall_s(JOB, None, 900.0) > 600.0


def test_young_daly_interval_and_its_bounds():
    assert young_daly_interval_s(5.0, 900.0, 1.0, 1e6) == pytest.approx(math.sqrt(2 * 5 * 900))
    assert young_daly_interval_s(5.0, 900.0, 120.0, 600.0) == 120.0
    assert young_daly_interval_s(5.0, 1e9, 120.0, 600.0) == 600.0
    with pytest.raises(ValueError):
        young_daly_interval_s(5.0, 0.0, 1.0, 10.0)
    with pytest.raises(ValueError):
        young_daly_interval_s(5.0, 10.0, 10.0, 1.0)
    got = adaptive_interval_s(5.0, 900.0, 10.0, 1800.0)
    assert got == pytest.approx(math.sqrt(2 * 5 * 900), rel=1e-6)


@pytest.mark.parametrize("mtbf", [300.0, 900.0, 3600.0])
def test_young_daly_is_near_the_formula_optimum(mtbf):
    best_every, best = optimal_interval_by_formula(JOB, mtbf)
    assert best_every is not None
    adaptive = expected_waste_s(JOB, young_daly_interval_s(5.0, mtbf, 10.0, 1800.0), mtbf)
    # Young/Daly ignores the job's finite length (the last segment has no checkpoint): close, not exact.
    assert best <= adaptive <= best * 1.15
    assert best < expected_waste_s(JOB, None, mtbf)


@pytest.mark.parametrize("interval", [None, 30.0, 100.0])
def test_monte_carlo_agrees_with_the_expectation(interval):
    tally = monte_carlo(JOB, interval, 900.0, jobs=4000, seed=11)
    want = expected_waste_s(JOB, interval, 900.0)
    assert abs(tally.mean_waste_s() - want) < max(4 * tally.ci95_s() / 1.96, 0.5)
    # the split adds up to the total
    assert tally.lost_work_s + tally.checkpoint_s + tally.restart_s == pytest.approx(tally.waste_s, rel=1e-9)


def test_monte_carlo_is_seeded_and_notice_saves_work():
    a = monte_carlo(JOB, None, 600.0, jobs=500, seed=3)
    b = monte_carlo(JOB, None, 600.0, jobs=500, seed=3)
    assert a.per_job_waste == b.per_job_waste
    noticed = monte_carlo(JOB, None, 600.0, jobs=500, seed=3, notice_share=1.0)
    assert noticed.lost_work_s < a.lost_work_s / 5
    assert noticed.checkpoint_s > 0


def test_no_preemptions_means_only_checkpoint_overhead():
    t = monte_carlo(JOB, 100.0, 1e15, jobs=10, seed=1)
    assert t.preemptions == 0
    assert t.mean_waste_s() == pytest.approx(25.0)
    assert t.ci95_s() == pytest.approx(0.0)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        JobModel(0.0, 1.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        JobModel(10.0, 1.0, -1.0, 0.0)
    with pytest.raises(ValueError):
        monte_carlo(JOB, None, 100.0, jobs=0, seed=1)
    with pytest.raises(ValueError):
        monte_carlo(JOB, None, 100.0, jobs=1, seed=1, notice_share=1.5)
    with pytest.raises(ValueError):
        expected_wall_s(JOB, None, 0.0)
    assert WasteTally().mean_waste_s() == 0.0
