"""One place turns the settings into the hub's and a worker's configuration: every field of
HubConfig and WorkerConfig named as a setting takes it, with no copy per field."""

from __future__ import annotations

import dataclasses

import pytest

from dispatcher.hub_config import HubConfig
from schemas.cluster import ClusterPolicy
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.settings import TrainhubSettings
from workers.cluster_spec import parse_cluster_spec
from workers.worker_config import WorkerConfig


def test_every_hub_field_named_as_a_setting_takes_it() -> None:
    settings = TrainhubSettings(
        max_heartbeat_age=12.0,
        exclusion_seconds=45.0,
        waiting_status_interval=2.0,
        placement={"queue_limits": {"a": 3}},
    )
    config = settings.hub_config()
    shared = {f.name for f in dataclasses.fields(HubConfig)} & set(TrainhubSettings.model_fields)
    assert shared >= {"max_heartbeat_age", "exclusion_seconds", "waiting_status_interval"}
    for name in shared - {"placement"}:
        assert getattr(config, name) == getattr(settings, name), name
    assert config.lost_after == 12.0  # a cluster is lost when its heartbeat is stale
    assert config.placement.queue_limits == {"a": 3}
    assert (config.source, config.schedule_interval) == (HubConfig().source, 1.0)


def test_invalid_placement_settings_are_a_value_error() -> None:
    with pytest.raises(ValueError):
        TrainhubSettings(placement={"scoring": {"no-such-policy": 1}}).hub_config()


def test_a_worker_takes_the_settings_and_its_cluster_s_own() -> None:
    settings = TrainhubSettings(
        heartbeat_interval=2.0, unschedulable_timeout=9.0, heartbeat_overdue_after=7.5
    )
    policy = ClusterPolicy.allowing(["hostPath"])
    config = settings.worker_config(
        "east", labels={"zone": "a"}, namespaces=["x"], weight=5, cost=1.5, policy=policy
    )
    assert config == WorkerConfig(
        cluster="east",
        heartbeat_interval=2.0,
        unschedulable_timeout=9.0,
        overdue_after=7.5,
        labels={"zone": "a"},
        namespaces=["x"],
        weight=5,
        cost=1.5,
        policy=policy,
    )
    defaults = TrainhubSettings().worker_config("west")
    assert defaults.heartbeat_overdue_after == 3 * defaults.heartbeat_interval


def test_the_embedded_runner_takes_the_settings_with_its_own_timings() -> None:
    settings = TrainhubSettings(exclusion_seconds=33.0, unschedulable_timeout=8.0)
    options = EmbeddedOptions(
        clusters=[parse_cluster_spec("solo:cpu=4,memory=8Gi")],
        backend="sim",
        heartbeat_interval=0.5,
        max_heartbeat_age=4.0,
        settings=settings,
    )
    system = Embedded(options)
    assert system.hub.config.exclusion_seconds == 33.0
    assert (system.hub.config.max_heartbeat_age, system.hub.config.lost_after) == (4.0, 4.0)
    worker = system.worker("solo")
    assert (worker.config.heartbeat_interval, worker.config.unschedulable_timeout) == (0.5, 8.0)


def test_the_retentions_reach_the_hub_and_the_workers() -> None:
    settings = TrainhubSettings(finished_retention=3600, run_retention=5)
    assert settings.hub_config().finished_retention == 3600
    assert settings.worker_config("east").run_retention == 5
