"""Host ports: which a pod holds, and placement spreading such pods one to a node."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.placement import Placer, plan_placement
from dispatcher.reservation_versions import VersionedReservations
from schemas.cluster import ClusterPolicy, ClusterSnapshot
from schemas.host_ports import pod_host_ports
from schemas.job_parsing import parse_job
from tests.helpers import cluster, jax_job, node, on_host_network


def test_a_port_is_held_where_it_has_a_host_port_or_the_pod_uses_the_host_network() -> None:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "a",
                "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}],
            },
            {"name": "b", "ports": [{"containerPort": 53, "hostPort": 53, "protocol": "UDP"}]},
        ]
    }
    assert pod_host_ports(spec) == {"TCP/8080", "UDP/53"}
    # On the host network every port is held, at its containerPort unless hostPort says.
    assert pod_host_ports({**spec, "hostNetwork": True}) == {"TCP/8080", "TCP/81", "UDP/53"}


def test_only_containers_that_run_with_the_pod_hold_ports() -> None:
    spec = {
        "hostNetwork": True,
        "initContainers": [
            {"name": "setup", "ports": [{"containerPort": 7000}]},
            {"name": "proxy", "restartPolicy": "Always", "ports": [{"containerPort": 7001}]},
        ],
        "containers": [{"name": "main"}],
    }
    assert pod_host_ports(spec) == {"TCP/7001"}


def test_malformed_ports_hold_nothing_and_do_not_raise() -> None:
    spec = {
        "containers": [
            {"name": "a", "ports": [{"hostPort": "x"}, {"hostPort": 0}, {"hostPort": 70000}, 5]},
            "not a container",
        ]
    }
    assert pod_host_ports(spec) == frozenset()


def _pytorch(name: str, workers: int, *, port: int | None = None, host_network: bool = True) -> Any:
    container: dict[str, Any] = {
        "name": "pytorch",
        "image": "x",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    if port is not None:
        container["ports"] = [{"name": "pytorchjob-port", "containerPort": port}]
    template = {"spec": {"hostNetwork": host_network, "containers": [container]}}
    return parse_job(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "runPolicy": {"managedBy": "trainhub.io/dispatcher"},
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": template},
                    "Worker": {"replicas": workers, "template": template},
                },
            },
        }
    )


def test_a_job_on_the_host_network_holds_the_port_its_kind_adds() -> None:
    job = _pytorch("p", 1)
    assert job.host_ports("Master") == job.host_ports("Worker") == {"TCP/23456"}
    assert _pytorch("own", 1, port=29500).host_ports("Worker") == {"TCP/29500"}
    assert _pytorch("pod-network", 1, host_network=False).host_ports("Worker") == frozenset()


def _hosts(name: str, count: int, *, held: dict[int, list[str]] | None = None) -> ClusterSnapshot:
    nodes = [node(f"{name}-{i}", cpu="16", memory="64Gi", pods="110") for i in range(count)]
    for index, ports in (held or {}).items():
        nodes[index] = nodes[index].model_copy(update={"hostPorts": ports})
    return cluster(name, *nodes, policy=ClusterPolicy(allowHostNetwork=True))


def test_pods_holding_a_port_are_spread_one_to_a_node() -> None:
    job = _pytorch("spread", 3)  # 4 pods of 1 cpu: one node could hold them all, but for the port
    placement = plan_placement(job, [_hosts("three", 3)])
    assert placement.chosen is None and placement.never_fits
    reason = placement.decision.clusters[0].reason or ""
    assert "room for 3 of 4" in reason or "room for 2 of 3" in reason, reason
    assert (
        "host port TCP/23456: one to a node; 4 pods of the job hold it, 3 nodes have it free"
        in reason
    )
    placement = plan_placement(job, [_hosts("four", 4)])
    assert placement.chosen == "four"
    assert sorted(placement.usage) == ["four-0", "four-1", "four-2", "four-3"]
    assert all(used["cpu"] == 1 for used in placement.usage.values())


def test_a_node_whose_pods_hold_the_port_takes_none_of_the_job() -> None:
    job = _pytorch("busy-port", 3)
    placement = plan_placement(job, [_hosts("four", 4, held={2: ["TCP/23456"]})])
    assert placement.chosen is None and not placement.never_fits  # it frees up later
    assert "not enough free capacity now" in (placement.decision.clusters[0].reason or "")
    # Another port, or another protocol, is no conflict.
    placement = plan_placement(job, [_hosts("four", 4, held={2: ["UDP/23456", "TCP/80"]})])
    assert placement.chosen == "four"
    alone = parse_job(on_host_network(jax_job("alone", workers=1)))  # one pod, the JAX port
    placement = plan_placement(alone, [_hosts("one", 1, held={0: ["TCP/6666"]})])
    assert "host port TCP/6666 is taken on every node that admits it" in (
        placement.decision.clusters[0].reason or ""
    )


def test_placed_jobs_keep_their_nodes_ports_until_the_heartbeat_shows_them() -> None:
    placer, reservations = Placer(), VersionedReservations()
    hosts = _hosts("hosts", 5)
    first = _pytorch("first", 2)  # 3 pods: 3 of the 5 nodes
    placed = placer.plan(first, [hosts], reservations=reservations)
    assert placed.chosen == "hosts"
    reservations.reserve("hosts", first.uid, placed.usage)
    second = _pytorch("second", 2)
    waiting = placer.plan(second, [hosts], reservations=reservations)
    assert waiting.chosen is None and not waiting.never_fits
    # A job on another port, and one without host ports, still fit beside them.
    other = _pytorch("other", 2, port=29500)
    assert placer.plan(other, [hosts], reservations=reservations).chosen == "hosts"
    plain = parse_job(jax_job("plain", workers=4, cpu="1"))
    assert placer.plan(plain, [hosts], reservations=reservations).chosen == "hosts"
    # The first job's pods are seen on their nodes, and then it ends.
    reservations.release(first.uid)
    assert placer.plan(second, [hosts], reservations=reservations).chosen == "hosts"


@pytest.mark.parametrize("cached", [True, False])
def test_ports_change_no_decision_of_jobs_that_hold_none(cached: bool) -> None:
    held = {0: ["TCP/23456"], 1: ["TCP/23456", "TCP/6666"]}
    plain = parse_job(jax_job("plain", workers=3, cpu="8"))
    placer = Placer()
    if cached:  # the placer has seen ports: its snapshots carry them from then on
        placer.plan(_pytorch("seen", 1), [_hosts("a", 3, held=held)])
    with_ports = placer.plan(plain, [_hosts("a", 3, held=held), _hosts("b", 2)])
    without = plan_placement(plain, [_hosts("a", 3), _hosts("b", 2)])
    assert with_ports.decision == without.decision
    assert with_ports.usage == without.usage
