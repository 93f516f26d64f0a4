"""How a pod's container statuses, as a kubelet writes them while it restarts containers in
place (pkg/kubelet/kubelet_pods.go), become restart counts and observations: an exit counts
from the moment it is seen, backing off adds nothing, and the new container's restartCount
does not count it twice."""

from __future__ import annotations

from typing import Any

from workers.backends.kube_watch import PodObserver, restart_state
from workers.rendering import LABEL_JOB_UID, LABEL_MANAGED


def _pod(policy: str, *statuses: dict[str, Any], phase: str = "Running") -> dict[str, Any]:
    names = [s["name"] for s in statuses]
    return {
        "metadata": {
            "name": "p",
            "namespace": "default",
            "uid": "uid-p",
            "labels": {LABEL_MANAGED: "trainhub", LABEL_JOB_UID: "j"},
            "annotations": {"kubectl.kubernetes.io/default-container": "main"},
        },
        "spec": {"restartPolicy": policy, "containers": [{"name": n} for n in names]},
        "status": {"phase": phase, "containerStatuses": list(statuses)},
    }


def _running(name: str = "main", restarts: int = 0, last: int | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": name,
        "restartCount": restarts,
        "state": {"running": {"startedAt": "2026-11-30T10:00:00Z"}},
    }
    if last is not None:
        status["lastState"] = {"terminated": {"exitCode": last}}
    return status


def _exited(name: str = "main", restarts: int = 0, code: int = 1) -> dict[str, Any]:
    return {"name": name, "restartCount": restarts, "state": {"terminated": {"exitCode": code}}}


def _backing_off(
    name: str = "main", restarts: int = 0, code: int = 1, reason: str = "CrashLoopBackOff"
) -> dict[str, Any]:
    return {
        "name": name,
        "restartCount": restarts,
        "state": {"waiting": {"reason": reason}},
        "lastState": {"terminated": {"exitCode": code}},
    }


def _state(pod: dict[str, Any]) -> tuple[int, bool, int | None]:
    found = restart_state(pod)
    return found.restarts, found.restarting, found.exit_code


def test_one_exit_counts_once_through_the_kubelets_whole_sequence() -> None:
    sequence = [
        (_running(), (0, False, None)),
        (_exited(code=3), (1, True, 3)),
        (_backing_off(code=3), (1, True, 3)),
        (_running(restarts=1, last=3), (1, False, 3)),
        (_exited(restarts=1, code=137), (2, True, 137)),
        (_running(restarts=2, last=137), (2, False, 137)),
    ]
    for status, expected in sequence:
        assert _state(_pod("OnFailure", status)) == expected, status


def test_what_the_kubelet_does_not_restart_counts_nothing() -> None:
    assert _state(_pod("OnFailure", _exited(code=0), _running("side"))) == (0, False, None)
    assert _state(_pod("Never", _exited(code=1), _running("side"))) == (0, False, None)
    # A new container being created already counts its predecessor's exit in restartCount.
    creating = _backing_off(restarts=1, code=1, reason="ContainerCreating")
    assert _state(_pod("OnFailure", creating)) == (1, False, 1)
    # A pod that ended restarts nothing more: only its restartCounts count.
    failed = _pod("OnFailure", _exited(restarts=2, code=1), phase="Failed")
    assert _state(failed) == (2, False, None)


def test_under_always_a_clean_exit_restarts_too_and_every_container_counts() -> None:
    pod = _pod("Always", _exited(code=0), _running("side", restarts=2, last=1))
    assert _state(pod) == (3, True, 0)  # the main container's exit first


def test_init_containers_restart_only_after_failing_unless_they_are_sidecars() -> None:
    pod = _pod("Always", _running(), phase="Pending")
    sidecar = {"name": "proxy", "restartPolicy": "Always"}
    pod["spec"]["initContainers"] = [{"name": "fetch"}, sidecar]
    pod["status"]["containerStatuses"] = []
    pod["status"]["initContainerStatuses"] = [_exited("fetch", code=0), _running("proxy")]
    assert _state(pod) == (0, False, None)
    pod["status"]["initContainerStatuses"] = [_backing_off("fetch", restarts=1, code=2)]
    assert _state(pod) == (2, True, 2)
    pod["status"]["initContainerStatuses"] = [_exited("fetch", code=0), _exited("proxy", code=0)]
    assert _state(pod) == (1, True, 0)


def test_the_observer_reports_each_new_restart_state_once() -> None:
    observer = PodObserver()
    reported = []
    for status in (
        _running(),
        _running(),
        _exited(code=3),
        _backing_off(code=3),
        _running(restarts=1, last=3),
        _running(restarts=1, last=3),
    ):
        found = observer.observe(_pod("OnFailure", status))
        if found is not None:
            reported.append((found.phase, found.restarts, found.restarting, found.exit_code))
            assert found.uid == "uid-p"
    assert reported == [
        ("Running", 0, False, None),
        ("Running", 1, True, 3),
        ("Running", 1, False, 3),
    ]
