"""A worker's operator settings (weight, cost, pod policy) reach the hub in its heartbeats
and steer placement: from `trainhub worker` flags to the decision."""

from __future__ import annotations

import asyncio
import socket

import pytest
from typer.testing import CliRunner

from bus.memory import MemoryBus
from bus.topics import Topics
from dispatcher.hub import Hub, HubConfig
from dispatcher.placement_config import PlacementConfig
from schemas.cluster import ClusterPolicy
from schemas.status import JobPhase
from tests.helpers import jax_job, until
from trainhub import processes
from trainhub.cli import app
from trainhub.producer import submit_document
from trainhub.settings import load_settings
from workers.backends.sim import SimBackend
from workers.cluster_spec import parse_cluster_spec
from workers.worker import Worker, WorkerConfig


def test_policy_allows_exactly_what_is_named() -> None:
    policy = ClusterPolicy.allowing(["hostPath", "privileged"])
    assert policy.allowHostPath and policy.allowPrivileged
    assert not policy.allowHostNetwork and not policy.allowHostPID
    assert ClusterPolicy.allowing([]) == ClusterPolicy()
    with pytest.raises(ValueError, match=r"unknown pod privilege 'hostUsers'.*hostPID"):
        ClusterPolicy.allowing(["hostUsers"])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--allow", "root"], "unknown pod privilege 'root'"),
        (["--pod-security", "strict"], "unknown pod security level 'strict'"),
        (["--weight", "120"], "--weight must be within 0..100"),
        (["--cost", "-1"], "--cost must be >= 0"),
        (["--metrics-port", "99999"], "metrics_port"),
        (["--label", "noequals"], "--label takes KEY=VALUE"),
    ],
)
def test_worker_refuses_bad_cluster_options(flags: list[str], message: str) -> None:
    # Usage errors, said before anything connects: exit 2, as typer's own.
    args = ["worker", "--cluster", "a", "--backend", "sim", "--bootstrap", "127.0.0.1:1", *flags]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_metrics_port_in_use_is_refused_before_connecting() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for command in (["hub"], ["worker", "--cluster", "a", "--backend", "sim"], ["up"]):
            args = [*command, "--bootstrap", "127.0.0.1:1", "--metrics-port", port]
            result = CliRunner().invoke(app, args)
            assert result.exit_code == 2, result.output
            assert f"--metrics-port {port}: cannot listen there" in result.output


async def test_heartbeats_carry_weight_cost_and_policy_and_placement_follows_them() -> None:
    bus = MemoryBus()
    await bus.start()
    topics = Topics(prefix="opts")
    # Weights only: the cheaper, preferred cluster wins although the other is emptier.
    placement = PlacementConfig.from_dict({"scoring": {"cluster-weight": 1, "cost": 1}})
    hub = Hub(bus, topics, HubConfig(schedule_interval=0.05, placement=placement))
    configs = [
        WorkerConfig(cluster="plain", heartbeat_interval=0.2, weight=20, cost=3.0),
        WorkerConfig(
            cluster="open",
            heartbeat_interval=0.2,
            weight=90,
            cost=1.0,
            policy=ClusterPolicy.allowing(["hostPath"]),
        ),
    ]
    workers = [
        Worker(
            bus, SimBackend(parse_cluster_spec(f"{c.cluster}:cpu=16,memory=64Gi").pool()), c, topics
        )
        for c in configs
    ]
    await hub.start()
    for worker in workers:
        await worker.start()
    try:
        await until(lambda: len(hub.clusters.all()) == 2)
        open_ = hub.clusters.get("open")
        assert open_ is not None
        assert (open_.weight, open_.cost, open_.policy.allowHostPath) == (90, 1.0, True)
        plain = hub.clusters.get("plain")
        assert plain is not None and not plain.policy.allowHostPath

        ordinary = await submit_document(bus, topics, jax_job("ordinary", workers=1))
        mounted = jax_job("mounted", workers=1)
        spec = mounted["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]
        spec["volumes"] = [{"name": "data", "hostPath": {"path": "/data"}}]
        hostpath = await submit_document(bus, topics, mounted)
        await until(
            lambda: all(
                (r := hub.ledger.get(u)) is not None and r.cluster is not None
                for u in (ordinary, hostpath)
            )
        )
        first, second = hub.ledger.get(ordinary), hub.ledger.get(hostpath)
        assert first is not None and second is not None
        assert first.cluster == "open"  # weight 90 and the lower cost
        assert second.cluster == "open" and second.decision is not None
        # A placed job's decision counts the clusters that refused it, by kind of reason.
        assert second.decision.rejected == {"refused by pod security policy": 1}
        await until(
            lambda: all(
                (r := hub.ledger.get(u)) is not None and r.phase == JobPhase.SUCCEEDED
                for u in (ordinary, hostpath)
            )
        )
    finally:
        for worker in workers:
            await worker.stop()
        await hub.stop()


def test_heartbeat_overdue_after_reaches_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """`heartbeat_overdue_after` (flag, variable or YAML key) sets when a worker sweeps."""
    seen: list[WorkerConfig] = []

    class Built(Exception):
        pass

    def capture(
        bus: object, backend: object, config: WorkerConfig, *rest: object, **kw: object
    ) -> None:
        seen.append(config)
        raise Built

    monkeypatch.setattr(processes, "Worker", capture)
    monkeypatch.setenv("TRAINHUB_HEARTBEAT_OVERDUE_AFTER", "12.5")
    settings = load_settings(None, bootstrap="127.0.0.1:1")
    backend = SimBackend(parse_cluster_spec("a:cpu=4,memory=8Gi").pool())
    with pytest.raises(Built):
        asyncio.run(processes.run_worker(settings, backend, "a"))
    assert seen[0].heartbeat_overdue_after == 12.5
    # Unset, the worker keeps its own default (three heartbeat intervals).
    monkeypatch.delenv("TRAINHUB_HEARTBEAT_OVERDUE_AFTER")
    with pytest.raises(Built):
        asyncio.run(
            processes.run_worker(load_settings(None, bootstrap="127.0.0.1:1"), backend, "a")
        )
    assert seen[1].heartbeat_overdue_after == 3 * seen[1].heartbeat_interval


def test_a_non_positive_overdue_time_is_refused() -> None:
    args = ["worker", "--cluster", "a", "--backend", "sim", "--bootstrap", "127.0.0.1:1"]
    result = CliRunner().invoke(app, [*args, "--heartbeat-overdue-after", "0"])
    assert result.exit_code == 2, result.output
    assert "heartbeat_overdue_after" in result.output
