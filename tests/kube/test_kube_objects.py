"""How Node and Pod objects (as the apiserver returns them) become capacity and observations:
the cases the sandbox does not produce on its own (unready, cordoned and tainted nodes, init
containers, limits without requests, multi-container pods)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from schemas.cluster import Taint
from workers.backends.kube_capacity import node_snapshots, pod_requests
from workers.backends.kube_watch import PodObserver, main_exit_code
from workers.rendering import ANNOTATION_GANG_SIZE, LABEL_JOB_UID, LABEL_MANAGED


def _node(name: str, *, ready: bool = True, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"zone": "z1"}},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "2"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _pod(
    name: str,
    node: str | None,
    phase: str,
    containers: list[dict[str, Any]],
    *,
    job: str | None = None,
    gang: int | None = None,
    **spec: Any,
) -> dict[str, Any]:
    labels = {LABEL_MANAGED: "trainhub", LABEL_JOB_UID: job} if job else {}
    annotations = {ANNOTATION_GANG_SIZE: str(gang)} if gang is not None else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"nodeName": node, "containers": containers, **spec},
        "status": {"phase": phase},
    }


def _container(name: str = "c", **resources: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": resources}


def test_only_ready_schedulable_nodes_count_and_taints_are_reported() -> None:
    taint = {"key": "gpu", "value": "h100", "effect": "NoSchedule", "timeAdded": None}
    nodes = [
        _node("ok", taints=[taint]),
        _node("unready", ready=False),
        _node("cordoned", unschedulable=True),
    ]
    snapshots, jobs = node_snapshots(nodes, [])
    assert [n.name for n in snapshots] == ["ok"]
    assert snapshots[0].taints == [Taint(key="gpu", value="h100", effect="NoSchedule")]
    assert snapshots[0].labels == {"zone": "z1"}
    assert snapshots[0].allocatable["nvidia.com/gpu"] == Decimal(2)
    assert snapshots[0].requested == {"pods": Decimal(0)}
    assert jobs == set()


def test_requests_of_bound_non_terminal_pods_are_summed_per_node() -> None:
    pods = [
        _pod("a", "n1", "Running", [_container(requests={"cpu": "1", "memory": "1Gi"})], job="j1"),
        _pod("b", "n1", "Pending", [_container(requests={"cpu": "500m"})]),  # not ours
        _pod("done", "n1", "Succeeded", [_container(requests={"cpu": "2"})], job="j2"),
        _pod("waiting", None, "Pending", [_container(requests={"cpu": "3"})], job="j3"),
        _pod("gpu", "n2", "Running", [_container(limits={"nvidia.com/gpu": "1"})], job="j4"),
    ]
    snapshots, jobs = node_snapshots([_node("n1"), _node("n2")], pods)
    by_name = {n.name: n.requested for n in snapshots}
    assert by_name["n1"] == {
        "cpu": Decimal("1.5"),
        "memory": Decimal(2**30),
        "pods": Decimal(2),
    }
    assert by_name["n2"] == {"nvidia.com/gpu": Decimal(1), "pods": Decimal(1)}
    assert jobs == {"j1", "j4"}


def test_a_job_counts_as_included_only_once_its_whole_gang_is_bound() -> None:
    small = [_container(requests={"cpu": "1"})]
    pods = [
        # "half": two of its four pods bound, one waiting for a node, one not made yet.
        _pod("half-0", "n1", "Running", small, job="half", gang=4),
        _pod("half-1", "n2", "Pending", small, job="half", gang=4),
        _pod("half-2", None, "Pending", small, job="half", gang=4),
        # "whole": all three bound.
        *(_pod(f"whole-{i}", "n1", "Running", small, job="whole", gang=3) for i in range(3)),
        # "ending": one of its two pods already succeeded: its reservation went long ago.
        _pod("ending-0", "n2", "Succeeded", small, job="ending", gang=2),
        _pod("ending-1", "n2", "Running", small, job="ending", gang=2),
        # Made before pods carried their gang size: one bound pod is enough, as before.
        _pod("old-0", "n2", "Running", small, job="old"),
        _pod("odd-0", "n2", "Running", small, job="odd", gang=0),
    ]
    snapshots, jobs = node_snapshots([_node("n1"), _node("n2")], pods)
    assert jobs == {"whole", "old", "odd"}
    # The bound pods of "half" still count on their nodes.
    by_name = {n.name: n.requested for n in snapshots}
    assert by_name["n1"]["cpu"] == Decimal(4)
    assert by_name["n2"]["cpu"] == Decimal(4)


def test_init_containers_count_as_their_largest_and_overhead_adds() -> None:
    spec = {
        "containers": [_container(requests={"cpu": "1"}), _container("b", requests={"cpu": "1"})],
        "initContainers": [_container("init", requests={"cpu": "3", "memory": "1Gi"})],
        "overhead": {"cpu": "100m"},
    }
    assert pod_requests(spec) == {"cpu": Decimal("3.1"), "memory": Decimal(2**30)}
    # A sidecar (restartPolicy Always) keeps running: it adds to the containers and to the
    # init containers after it.
    sidecar = _container("proxy", requests={"cpu": "500m"}) | {"restartPolicy": "Always"}
    spec["initContainers"] = [sidecar, _container("init", requests={"cpu": "3"})]
    assert pod_requests(spec) == {"cpu": Decimal("3.6")}  # max(1+1+0.5, 3+0.5) + overhead


def _terminated(name: str, code: int) -> dict[str, Any]:
    return {"name": name, "state": {"terminated": {"exitCode": code}}}


def test_exit_code_comes_from_the_main_container() -> None:
    pod = _pod("p", "n", "Failed", [_container("sidecar"), _container("pytorch")], job="j")
    pod["status"]["containerStatuses"] = [_terminated("sidecar", 0), _terminated("pytorch", 7)]
    assert main_exit_code(pod) == 7
    pod["metadata"]["annotations"] = {"kubectl.kubernetes.io/default-container": "sidecar"}
    assert main_exit_code(pod) == 0
    pod["status"]["containerStatuses"] = [_terminated("sidecar", 0)]
    pod["metadata"]["annotations"] = {}
    assert main_exit_code(pod) == 0  # the main one has no exit code: the first that has


def test_observer_reports_each_phase_once_and_unschedulable_separately() -> None:
    observer = PodObserver()
    pod = _pod("p", None, "Pending", [_container()], job="j")
    first = observer.observe(pod)
    assert first is not None and (first.phase, first.message) == ("Pending", None)
    assert observer.observe(pod) is None
    pod["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient cpu.",
        }
    ]
    stuck = observer.observe(pod)
    assert stuck is not None
    assert stuck.message == "Unschedulable: 0/3 nodes are available: 3 Insufficient cpu."
    assert observer.observe(pod) is None
    pod["spec"]["nodeName"], pod["status"] = "n1", {"phase": "Failed", "message": "Evicted"}
    failed = observer.observe(pod)
    assert failed is not None and (failed.phase, failed.node, failed.message) == (
        "Failed",
        "n1",
        "Evicted",
    )
    assert observer.observe(_pod("theirs", None, "Pending", [_container()])) is None


def test_host_ports_of_bound_non_terminal_pods_are_reported_per_node() -> None:
    ported = {"name": "c", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080}]}
    on_host = {"name": "c", "image": "x", "ports": [{"containerPort": 23456}]}
    pods = [
        _pod("web", "n1", "Running", [ported]),
        _pod("trainer", "n1", "Running", [on_host], job="j1", hostNetwork=True),
        _pod("ended", "n2", "Succeeded", [ported]),  # holds nothing any more
        _pod("waiting", None, "Pending", [on_host], hostNetwork=True),  # not bound yet
        _pod("plain", "n2", "Running", [{**on_host, "name": "d"}]),  # pod network: no host port
    ]
    snapshots, _ = node_snapshots([_node("n1"), _node("n2")], pods)
    assert {n.name: n.hostPorts for n in snapshots} == {"n1": ["TCP/23456", "TCP/8080"], "n2": []}
