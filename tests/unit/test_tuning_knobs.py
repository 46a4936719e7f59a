"""The projector's, webhook notifier's and janitor's tuning knobs are settable from the environment
(spotreel.config.knobs.dataclass_overrides): typed, refused by name when malformed, and never the wiring fields or a
knob another variable already sets."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotreel.config import knobs
from spotreel.api.config import from_env as gateway_from_env
from spotreel.services.janitor import janitor
from spotreel.services.projector import consumer
from spotreel.services.webhooks.service import config_for
from spotreel.config.settings import Settings

BASE = consumer.ProjectorConfig(bootstrap="b", group_id="g", events_topic="e", events_deadletter_topic="d")


def test_the_projector_reads_its_tuning_with_the_fields_types() -> None:
    env = {"SPOTREEL_PROJECTOR_CACHE_SIZE": "5000", "SPOTREEL_PROJECTOR_POLL_TIMEOUT_S": "0.05",
           "SPOTREEL_PROJECTOR_SESSION_TIMEOUT_MS": "6000"}
    changed = replace(BASE, **knobs.dataclass_overrides(consumer.ProjectorConfig, consumer.ENV_PREFIX, env,
                                                       consumer.NOT_FROM_ENV))
    assert (changed.cache_size, changed.poll_timeout_s, changed.session_timeout_ms) == (5000, 0.05, 6000)
    assert changed.batch_size == BASE.batch_size and changed.lag_every_s == BASE.lag_every_s


def test_wiring_and_knobs_set_elsewhere_are_not_read() -> None:
    env = {"SPOTREEL_PROJECTOR_EVENTS_TOPIC": "elsewhere", "SPOTREEL_PROJECTOR_BATCH_SIZE": "7",
           "SPOTREEL_PROJECTOR_REBUILD": "1", "SPOTREEL_JANITOR_SWEEP_EVERY_S": "5"}
    assert knobs.dataclass_overrides(consumer.ProjectorConfig, consumer.ENV_PREFIX, env, consumer.NOT_FROM_ENV) == {}
    assert knobs.dataclass_overrides(janitor.JanitorConfig, janitor.ENV_PREFIX, env, janitor.NOT_FROM_ENV) == {}


def test_the_notifier_config_takes_its_knobs_from_the_environment_given() -> None:
    config = config_for(Settings(), env={"SPOTREEL_WEBHOOKS_MAX_IN_FLIGHT": "64",
                                         "SPOTREEL_WEBHOOKS_SECRET_CACHE_S": "2.5",
                                         "SPOTREEL_WEBHOOKS_GATEWAY_URL": "http://elsewhere"})
    assert (config.max_in_flight, config.secret_cache_s) == (64, 2.5)
    assert config.gateway_url == Settings().gateway_url
    assert config_for(Settings(), env={}).max_in_flight == 2000


@pytest.mark.parametrize(("env", "says"), [
    ({"SPOTREEL_PROJECTOR_CACHE_SIZE": "lots"}, "SPOTREEL_PROJECTOR_CACHE_SIZE must be an integer, got 'lots'"),
    ({"SPOTREEL_PROJECTOR_LAG_EVERY_S": "5s"}, "SPOTREEL_PROJECTOR_LAG_EVERY_S must be a number, got '5s'"),
])
def test_a_malformed_value_is_refused_with_its_variable(env: dict[str, str], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        knobs.dataclass_overrides(consumer.ProjectorConfig, consumer.ENV_PREFIX, env, consumer.NOT_FROM_ENV)


def test_a_bool_knob_is_one_or_zero() -> None:
    assert knobs.dataclass_overrides(consumer.ProjectorConfig, consumer.ENV_PREFIX,
                                     {"SPOTREEL_PROJECTOR_UNTIL_IDLE": "yes"}, frozenset()) == {"until_idle": True}
    with pytest.raises(ValueError, match="SPOTREEL_PROJECTOR_UNTIL_IDLE must be 1 or 0, got 'maybe'"):
        knobs.dataclass_overrides(consumer.ProjectorConfig, consumer.ENV_PREFIX,
                                  {"SPOTREEL_PROJECTOR_UNTIL_IDLE": "maybe"}, frozenset())


def test_a_field_of_another_type_must_be_skipped_by_name() -> None:
    with pytest.raises(TypeError, match="policy"):
        knobs.dataclass_overrides(type(config_for(Settings())), "SPOTREEL_WEBHOOKS_",
                                  {"SPOTREEL_WEBHOOKS_POLICY": "x"}, frozenset())


def test_the_gateway_reads_its_policy_through_the_same_reader() -> None:
    assert gateway_from_env({"SPOTREEL_GATEWAY_MAX_PROMPT_CHARS": "8000"}).max_prompt_chars == 8000
    with pytest.raises(ValueError, match="SPOTREEL_GATEWAY_MAX_PROMPT_CHARS must be an integer"):
        gateway_from_env({"SPOTREEL_GATEWAY_MAX_PROMPT_CHARS": "many"})


def test_the_s3_endpoint_is_the_local_server_unless_the_clients_are_told_otherwise() -> None:
    from spotreel.devstack.seaweed import local_store

    local = Settings.from_env({})
    assert local.s3_endpoint == local.local_s3_endpoint == f"http://127.0.0.1:{local.s3_port}"
    managed = Settings.from_env({"SPOTREEL_S3_ENDPOINT_URL": "https://s3.eu-west-1.amazonaws.com"})
    assert managed.s3_endpoint == "https://s3.eu-west-1.amazonaws.com"
    # The launcher keeps starting, probing and filling the store it runs.
    assert local_store(managed).s3_endpoint == managed.local_s3_endpoint == local.s3_endpoint
