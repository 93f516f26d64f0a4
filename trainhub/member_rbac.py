"""A worker's least-privilege identity in its member cluster, as RBAC objects: its pods,
services, configmaps and secrets (a TrainJob's MPI SSH keys; and pod logs, and events), and
the ServiceAccount, Role and RoleBinding of an MPIJob's launcher, only in the allowed
namespaces (every namespace when the worker accepts jobs for all); read-only nodes; and
read-only pods cluster-wide, because a node's free capacity depends on everyone's pods. With a
gang scheduler, also its PodGroups in those namespaces and read-only PriorityClasses (they
order a PodGroup's minResources). In direct mode, the Kubeflow jobs (kubeflow.org/v1) whose
objects it makes where the cluster serves their CRDs (create, get, patch, delete, and a patch
of their status); in delegate mode, those it hands the member's Training Operator, in those
namespaces. `trainhub member-rbac` prints them for a real cluster; the sandbox creates them
for its worker user."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from workers.backends.delegated_kinds import DELEGATED_PLURALS, KUBEFLOW_GROUP
from workers.gang_scheduling import POD_GROUP_APIS

WORKER_USER = "trainhub-worker"
_RBAC = "rbac.authorization.k8s.io/v1"
_RBAC_GROUP = "rbac.authorization.k8s.io"
_RBAC_PATH = f"/apis/{_RBAC}"
_WORKER_ROLE = "trainhub-worker"
_WORKER_NODE_ROLE = "trainhub-worker-nodes"
_WORKER_POD_READER_ROLE = "trainhub-worker-pod-reader"
_WORKER_PRIORITY_READER_ROLE = "trainhub-worker-priority-classes"
_READ = ["get", "list", "watch"]
_WRITE = ["create", "get", "list", "watch", "delete", "patch"]
_CREATE_AND_DELETE = ["create", "list", "delete"]
"""Objects created once per job (409 means done) and deleted with it, found by label."""
_POD_GROUP_VERBS = ["create", "get", "list", "update", "delete"]
"""A job's PodGroup: created before its pods, read and replaced when it exists already with
another spec, deleted with the job (found by label)."""
_DELEGATED_JOB_VERBS = ["create", "get", "list", "watch", "patch", "delete"]
"""A delegated job's CR: created (409: read to see whose it is), watched for its status,
patched to suspend or resume it, deleted with the job."""
_OWNED_JOB_VERBS = ["create", "get", "list", "watch", "patch", "delete"]
"""A direct-mode job's own CR: created (409: read to see whose it is), its `suspend` patched
to follow the job's, watched so that a deletion by someone else reaches the job, deleted with
the job (found by name or by its objects' ownerReferences)."""


def namespace_manifest(name: str) -> dict[str, Any]:
    return _object("v1", "Namespace", name)


Subject = dict[str, str]
"""Who is granted: a User, or a ServiceAccount (see `user`, `service_account`)."""


def user(name: str) -> Subject:
    return {"apiGroup": _RBAC_GROUP, "kind": "User", "name": name}


def service_account(namespace: str, name: str) -> Subject:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def worker_rbac(
    namespaces: Sequence[str],
    subject: Subject | None = None,
    gang_scheduler: str | None = None,
    delegation: bool = False,
    direct: bool | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(collection path, object) pairs that grant the worker what it needs and no more; no
    `namespaces`: the namespaced rights in every namespace (a worker accepting all);
    `gang_scheduler` (volcano or scheduler-plugins): its PodGroups too; `delegation` (a
    worker in delegate mode): the kubeflow.org jobs too; `direct` (default: not `delegation`):
    the status of the jobs' own objects too (both: a cluster whose worker may run either)."""
    subject = subject or user(WORKER_USER)
    rules = _namespaced_rules(
        gang_scheduler, delegation, (not delegation) if direct is None else direct
    )
    readers = [
        (_WORKER_NODE_ROLE, _rule("nodes", _READ)),
        (_WORKER_POD_READER_ROLE, _rule("pods", _READ)),
    ]
    if gang_scheduler is not None:
        readers.append(
            (
                _WORKER_PRIORITY_READER_ROLE,
                _rule("priorityclasses", ["get"], group="scheduling.k8s.io"),
            )
        )
    for role_name, rule in readers:
        role = _object(_RBAC, "ClusterRole", role_name)
        role["rules"] = [rule]
        yield f"{_RBAC_PATH}/clusterroles", role
        binding = _binding("ClusterRoleBinding", role_name, None, subject)
        yield f"{_RBAC_PATH}/clusterrolebindings", binding
    if not namespaces:
        role = _object(_RBAC, "ClusterRole", _WORKER_ROLE)
        role["rules"] = rules
        yield f"{_RBAC_PATH}/clusterroles", role
        binding = _binding("ClusterRoleBinding", _WORKER_ROLE, None, subject)
        yield f"{_RBAC_PATH}/clusterrolebindings", binding
    for namespace in namespaces:
        role = _object(_RBAC, "Role", _WORKER_ROLE, namespace)
        role["rules"] = rules
        yield f"{_RBAC_PATH}/namespaces/{namespace}/roles", role
        binding = _binding("RoleBinding", _WORKER_ROLE, namespace, subject)
        yield f"{_RBAC_PATH}/namespaces/{namespace}/rolebindings", binding


def manifests(
    namespaces: Sequence[str],
    subject: Subject,
    gang_scheduler: str | None = None,
    delegation: bool = False,
) -> list[dict[str, Any]]:
    """The objects of `worker_rbac`, to apply with kubectl."""
    return [body for _, body in worker_rbac(namespaces, subject, gang_scheduler, delegation)]


def _namespaced_rules(
    gang_scheduler: str | None, delegation: bool, direct: bool
) -> list[dict[str, Any]]:
    rules = [
        _rule("pods", _WRITE),
        _rule("services", _WRITE),
        # MPIJob's hostfile; created before the pods, its host discovery script patched as
        # workers start and stop running, deleted with the job.
        _rule("configmaps", ["create", "get", "list", "delete", "patch"]),
        # A TrainJob's MPI SSH keys (Kubeflow Trainer's `<job>-mpi-ssh-auth`): created once,
        # immutable, deleted with the job by label. Never read: no get, list or watch.
        _rule("secrets", ["create", "deletecollection"]),
        _rule("pods/log", ["get"]),
        _rule("events", ["create"]),
        # An MPIJob's launcher runs as a ServiceAccount of its own whose Role lets it read
        # pods and exec into its workers (Training Operator v1.9's launcher RBAC).
        _rule("serviceaccounts", _CREATE_AND_DELETE),
        _rule("roles", _CREATE_AND_DELETE, group=_RBAC_GROUP),
        _rule("rolebindings", _CREATE_AND_DELETE, group=_RBAC_GROUP),
        # The apiserver lets an identity create a Role, or bind one, only with permissions
        # it holds itself, unless it has `escalate` on roles or `bind`. Those two would let
        # the worker grant anything (bind the namespace's admin role, or write any rule);
        # holding pods/exec adds nothing the worker cannot already do, since it creates
        # pods with any command here. So the worker holds the launcher's permission itself.
        _rule("pods/exec", ["create"]),
    ]
    if gang_scheduler is not None:
        api = POD_GROUP_APIS[gang_scheduler]
        rules.append(_rule(api.plural, _POD_GROUP_VERBS, group=api.group))
    plurals = list(DELEGATED_PLURALS.values())
    verbs = _DELEGATED_JOB_VERBS if delegation else _OWNED_JOB_VERBS
    rules.append(_rules(plurals, verbs, group=KUBEFLOW_GROUP))
    if direct:
        # Direct mode writes the status of the job's own object (where the cluster serves
        # the CRDs) as the Training Operator would.
        status = [f"{plural}/status" for plural in plurals]
        rules.append(_rules(status, ["patch"], group=KUBEFLOW_GROUP))
    return rules


def _object(api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    metadata = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}


def _rule(resource: str, verbs: list[str], *, group: str = "") -> dict[str, Any]:
    return _rules([resource], verbs, group=group)


def _rules(resources: list[str], verbs: list[str], *, group: str = "") -> dict[str, Any]:
    return {"apiGroups": [group], "resources": resources, "verbs": verbs}


def _binding(kind: str, role: str, namespace: str | None, subject: Subject) -> dict[str, Any]:
    binding = _object(_RBAC, kind, role, namespace)
    role_kind = "ClusterRole" if namespace is None else "Role"
    binding["roleRef"] = {"apiGroup": _RBAC_GROUP, "kind": role_kind, "name": role}
    binding["subjects"] = [subject]
    return binding
