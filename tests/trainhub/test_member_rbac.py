"""`trainhub member-rbac`: the RBAC a worker's identity needs in its member cluster."""

from __future__ import annotations

from typing import Any

import yaml
from typer.testing import CliRunner

from trainhub.cli import app


def _print(*args: str) -> tuple[int, list[dict[str, Any]], str]:
    result = CliRunner().invoke(app, ["member-rbac", *args])
    objects = list(yaml.safe_load_all(result.stdout)) if result.exit_code == 0 else []
    return result.exit_code, objects, result.output


def _rules(role: dict[str, Any]) -> dict[str, set[str]]:
    return {r["resources"][0]: set(r["verbs"]) for r in role["rules"]}


def test_namespaced_rights_only_in_the_accepted_namespaces() -> None:
    code, objects, _ = _print("-n", "default", "-n", "team-a", "--user", "east-worker")
    assert code == 0
    kinds = sorted((o["kind"], o["metadata"].get("namespace", "")) for o in objects)
    assert kinds == [
        ("ClusterRole", ""),
        ("ClusterRole", ""),
        ("ClusterRoleBinding", ""),
        ("ClusterRoleBinding", ""),
        ("Role", "default"),
        ("Role", "team-a"),
        ("RoleBinding", "default"),
        ("RoleBinding", "team-a"),
    ]
    cluster_wide = {o["metadata"]["name"]: _rules(o) for o in objects if o["kind"] == "ClusterRole"}
    # Cluster-wide: reading nodes and pods (a node's free capacity counts everyone's pods).
    assert sorted(cluster_wide.values(), key=str) == [
        {"nodes": {"get", "list", "watch"}},
        {"pods": {"get", "list", "watch"}},
    ]
    role = next(o for o in objects if o["kind"] == "Role")
    rules = _rules(role)
    assert (
        rules["pods"] == rules["services"] == {"create", "get", "list", "watch", "delete", "patch"}
    )
    # Secrets: a TrainJob's MPI SSH keys are created and deleted (by label), never read.
    assert rules["secrets"] == {"create", "deletecollection"}
    assert "nodes" not in rules
    for binding in (o for o in objects if o["kind"].endswith("Binding")):
        assert binding["subjects"] == [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "east-worker"}
        ]


def test_without_namespaces_the_worker_gets_them_everywhere() -> None:
    code, objects, _ = _print("--service-account", "trainhub/east")
    assert code == 0
    assert {o["kind"] for o in objects} == {"ClusterRole", "ClusterRoleBinding"}
    everywhere = next(o for o in objects if o["metadata"]["name"] == "trainhub-worker")
    assert everywhere["kind"] == "ClusterRole"
    assert _rules(everywhere)["pods"] >= {"create", "delete"}
    subjects = {str(o["subjects"]) for o in objects if o["kind"] == "ClusterRoleBinding"}
    assert subjects == {str([{"kind": "ServiceAccount", "name": "east", "namespace": "trainhub"}])}


def test_bad_arguments_are_one_line_errors() -> None:
    for args, message in (
        (("-n", "Team_A"), "a namespace is a DNS label"),
        (("--user", "a", "--service-account", "b/c"), "not both"),
        (("--service-account", "east"), "expected NAMESPACE/NAME"),
        (("--user", " "), "must not be blank"),
    ):
        code, _, output = _print(*args)
        assert code == 1, args
        assert message in output and "Traceback" not in output


def test_a_gang_scheduler_adds_its_pod_groups_and_priority_classes_only() -> None:
    code, plain, _ = _print("-n", "team-a")
    assert code == 0
    code, objects, _ = _print("-n", "team-a", "--gang-scheduler", "scheduler-plugins")
    assert code == 0
    role = next(o for o in objects if o["kind"] == "Role")
    groups = [r for r in role["rules"] if r["resources"] == ["podgroups"]]
    assert groups == [
        {
            "apiGroups": ["scheduling.x-k8s.io"],
            "resources": ["podgroups"],
            "verbs": ["create", "get", "list", "update", "delete"],
        }
    ]
    plain_role = next(o for o in plain if o["kind"] == "Role")
    assert [r for r in role["rules"] if r not in groups] == plain_role["rules"]
    added = [o for o in objects if o not in plain]
    assert sorted(o["kind"] for o in added) == ["ClusterRole", "ClusterRoleBinding", "Role"]
    readers = next(o for o in added if o["kind"] == "ClusterRole")
    assert readers["rules"] == [
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get"]}
    ]
    code, objects, _ = _print("--gang-scheduler", "volcano")
    role = next(
        o
        for o in objects
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "trainhub-worker"
    )
    assert ["scheduling.volcano.sh"] in [r["apiGroups"] for r in role["rules"]]
    code, _, output = _print("--gang-scheduler", "kueue")
    assert code != 0 and "volcano or scheduler-plugins" in output


def test_delegate_mode_grants_the_kubeflow_jobs_only_in_the_accepted_namespaces() -> None:
    code, plain, _ = _print("-n", "team-a")
    assert code == 0
    code, delegating, _ = _print("-n", "team-a", "--delegate")
    assert code == 0
    # The same objects, the namespaced Role with the same rule on the jobs (direct mode
    # watches its own objects too) and without their status: nothing cluster-wide grows.
    assert [o["kind"] for o in delegating] == [o["kind"] for o in plain]
    assert [o for o in delegating if o["kind"] != "Role"] == [
        o for o in plain if o["kind"] != "Role"
    ]
    (role,) = [o for o in delegating if o["kind"] == "Role"]
    (before,) = [o for o in plain if o["kind"] == "Role"]
    plurals = ["pytorchjobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs", "mpijobs"]
    jobs = {
        "apiGroups": ["kubeflow.org"],
        "resources": plurals,
        "verbs": ["create", "get", "list", "watch", "patch", "delete"],
    }
    assert jobs in role["rules"] and jobs in before["rules"]
    assert [r for r in role["rules"] if r not in before["rules"]] == []
    assert [r for r in before["rules"] if r not in role["rules"]] == [
        {
            "apiGroups": ["kubeflow.org"],
            "resources": [f"{p}/status" for p in plurals],
            "verbs": ["patch"],
        }
    ]


def test_direct_mode_may_make_each_jobs_own_object_and_write_its_status_only() -> None:
    code, objects, _ = _print("-n", "team-a")
    assert code == 0
    (role,) = [o for o in objects if o["kind"] == "Role"]
    kubeflow = [r for r in role["rules"] if r["apiGroups"] == ["kubeflow.org"]]
    plurals = ["pytorchjobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs", "mpijobs"]
    assert kubeflow == [
        {
            "apiGroups": ["kubeflow.org"],
            "resources": plurals,
            "verbs": ["create", "get", "list", "watch", "patch", "delete"],
        },
        {
            "apiGroups": ["kubeflow.org"],
            "resources": [f"{p}/status" for p in plurals],
            "verbs": ["patch"],
        },
    ]
    # Nothing cluster-wide about them.
    cluster_roles = [o for o in objects if o["kind"] == "ClusterRole"]
    assert all(r["apiGroups"] != ["kubeflow.org"] for o in cluster_roles for r in o["rules"])
