"""The projector's lag metric is never negative, whatever sentinel librdkafka reports (it once was)."""

from __future__ import annotations

from confluent_kafka import OFFSET_END, OFFSET_INVALID

from spotreel.services.projector.consumer import partition_lag


def test_known_offsets_give_the_distance_to_the_high_mark():
    assert partition_lag(10, 25) == 15
    assert partition_lag(25, 25) == 0


def test_a_position_past_a_stale_cached_high_mark_is_no_lag():
    assert partition_lag(30, 25) == 0


def test_unknown_high_mark_is_no_lag_and_unknown_position_is_the_whole_partition():
    assert partition_lag(10, OFFSET_INVALID) == 0
    assert partition_lag(OFFSET_INVALID, OFFSET_INVALID) == 0
    assert partition_lag(OFFSET_INVALID, 40) == 40
    assert partition_lag(OFFSET_END, 40) == 40
