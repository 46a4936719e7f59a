"""The services' Cassandra clients retry a lost node every few seconds for ever, never on the driver's
default schedule that grows to ten minutes (a Cassandra restart then left the gateway and the projector
failing for up to a minute after Cassandra was back)."""

from __future__ import annotations

import inspect
import itertools

from spotreel.devstack import cassandra
from spotreel.platform.cql import RECONNECT_MAX_S, cluster_for
from spotreel.services.projector import service as projector_service
from spotreel.services.webhooks import service as webhooks_service
from spotreel.config.settings import Settings


def test_the_reconnection_schedule_is_bounded_and_endless():
    cluster = cluster_for(Settings(cassandra_port=1))
    try:
        delays = list(itertools.islice(cluster.reconnection_policy.new_schedule(), 1000))
    finally:
        cluster.shutdown()
    assert len(delays) == 1000 and max(delays) <= RECONNECT_MAX_S and delays[0] <= 1.0


def test_every_long_running_service_builds_its_cluster_there():
    # The gateway goes through cql_session; the projector and the notifier open their own cluster.
    for build in (cassandra.cql_session, projector_service.build, webhooks_service.build):
        assert "cluster_for(settings" in inspect.getsource(build), build.__module__
