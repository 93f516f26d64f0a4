"""MPIJob (v1) as the Training Operator v1.9 renders it: launcher, workers, hostfile
ConfigMap, no Services; success is the launcher's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.errors import JobInvalid
from schemas.job_parsing import parse_job
from workers.frameworks import adapter_for
from workers.frameworks.base import ReplicaCounts
from workers.rendering import (
    LABEL_JOB_ROLE,
    LABEL_JOB_UID,
    PodPlan,
    config_map_plans,
    render_job,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "kubeflow"
ADAPTER = adapter_for("MPIJob")
KUBEXEC = (
    '#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\n/opt/kube/kubectl exec ${POD_NAME} -- /bin/sh -c "$*"'
)


def document() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DATA / "mpi-pi.yaml").read_text())
    return loaded


def env_of(pod: PodPlan) -> dict[str, str | None]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


def mounts_of(pod: PodPlan) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = getattr(pod.spec.containers[0], "volumeMounts", None) or []
    return mounts


def test_upstream_pi_example() -> None:
    job = parse_job(document())
    rendered = render_job(job)
    assert rendered.services == []
    assert [p.name for p in rendered.pods] == ["pi-launcher", "pi-worker-0", "pi-worker-1"]
    (config,) = rendered.config_maps
    assert config.name == "pi-config"
    assert config.labels["app"] == "pi" and config.labels[LABEL_JOB_UID] == job.uid
    assert config.data == {
        "hostfile": "pi-worker-0 slots=1\npi-worker-1 slots=1\n",
        "kubexec.sh": KUBEXEC,
        # Horovod's elastic host discovery: the workers Running now, none yet.
        "discover_hosts.sh": "#!/bin/sh",
    }
    assert [m["kind"] for m in rendered.manifests()] == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Pod",
        "Pod",
        "Pod",
    ]

    launcher, worker0, _ = rendered.pods
    assert env_of(launcher) == {
        "OMPI_MCA_plm_rsh_agent": "/etc/mpi/kubexec.sh",
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "NVIDIA_VISIBLE_DEVICES": "",
        "NVIDIA_DRIVER_CAPABILITIES": "",
        "I_MPI_HYDRA_BOOTSTRAP": "rsh",
        "I_MPI_HYDRA_BOOTSTRAP_EXEC": "/etc/mpi/kubexec.sh",
    }
    assert worker0.spec.containers[0].env is None
    assert launcher.labels[LABEL_JOB_ROLE] == "master"
    assert launcher.labels["training.kubeflow.org/replica-type"] == "launcher"
    assert LABEL_JOB_ROLE not in worker0.labels
    assert worker0.labels["training.kubeflow.org/replica-index"] == "0"
    # The mpi-port is not injected.
    assert all(p.spec.containers[0].ports is None for p in rendered.pods)
    assert all(p.spec.restartPolicy == "Never" for p in rendered.pods)
    assert launcher.default_container == "mpi-launcher"
    assert worker0.default_container == "mpi-worker"
    # The worker's own command stays.
    assert worker0.spec.containers[0].command == ["/usr/sbin/sshd"]


def test_launcher_and_worker_mount_the_config() -> None:
    launcher, worker, _ = render_job(parse_job(document())).pods
    assert mounts_of(launcher) == [
        {"name": "mpi-job-kubectl", "mountPath": "/opt/kube"},
        {"name": "mpi-job-config", "mountPath": "/etc/mpi"},
    ]
    volumes = {v["name"]: v for v in getattr(launcher.spec, "volumes", [])}
    assert volumes["mpi-job-kubectl"] == {"name": "mpi-job-kubectl", "emptyDir": {}}
    assert volumes["mpi-job-config"]["configMap"] == {
        "name": "pi-config",
        "items": [
            {"key": "kubexec.sh", "path": "kubexec.sh", "mode": 0o555},
            {"key": "hostfile", "path": "hostfile", "mode": 0o444},
            {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
        ],
    }
    (delivery,) = launcher.spec.initContainers or []
    assert delivery.name == "kubectl-delivery"
    assert delivery.image == "kubeflow/kubectl-delivery:latest"
    assert {e.name: e.value for e in delivery.env or []} == {
        "TARGET_DIR": "/opt/kube",
        "NAMESPACE": "default",
    }
    # No resources on the delivery container: it must not change where the pod fits.
    assert (
        launcher.requests
        == parse_job(document()).replica_specs["Launcher"].template.spec.total_requests()
    )
    assert mounts_of(worker) == [{"name": "mpi-job-config", "mountPath": "/etc/mpi"}]
    assert getattr(worker.spec, "volumes", None) == [
        {
            "name": "mpi-job-config",
            "configMap": {
                "name": "pi-config",
                "items": [{"key": "kubexec.sh", "path": "kubexec.sh", "mode": 0o555}],
            },
        }
    ]


def test_the_launcher_runs_as_its_own_account_allowed_to_exec_into_its_workers() -> None:
    job = parse_job(document())
    rendered = render_job(job)
    (access,) = rendered.access
    account, role, binding = access.manifests()
    for manifest in (account, role, binding):
        assert manifest["metadata"]["name"] == "pi-launcher"
        assert manifest["metadata"]["namespace"] == "default"
        assert manifest["metadata"]["labels"]["app"] == "pi"
        assert manifest["metadata"]["labels"][LABEL_JOB_UID] == job.uid
    assert (account["apiVersion"], account["kind"]) == ("v1", "ServiceAccount")
    assert role["apiVersion"] == "rbac.authorization.k8s.io/v1"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": [""],
            "resources": ["pods/exec"],
            "verbs": ["create"],
            "resourceNames": ["pi-worker-0", "pi-worker-1"],
        },
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "pi-launcher", "namespace": "default"}
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "pi-launcher",
    }
    launcher, worker, _ = rendered.pods
    assert launcher.manifest()["spec"]["serviceAccountName"] == "pi-launcher"
    assert "serviceAccountName" not in worker.manifest()["spec"]


def test_a_launcher_account_of_the_users_own_is_bound_instead() -> None:
    doc = document()
    doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["serviceAccountName"] = "mpi"
    rendered = render_job(parse_job(doc))
    (access,) = rendered.access
    account, role, binding = access.manifests()
    assert account["metadata"]["name"] == "mpi"
    assert (role["metadata"]["name"], binding["metadata"]["name"]) == ("pi-launcher",) * 2
    assert binding["subjects"][0]["name"] == "mpi"
    assert rendered.pods[0].manifest()["spec"]["serviceAccountName"] == "mpi"


def test_without_workers_the_launcher_may_exec_into_nothing() -> None:
    doc = document()
    doc["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 0
    (access,) = render_job(parse_job(doc)).access
    # Upstream writes the exec rule without names here, which would allow every pod.
    assert access.role_manifest()["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]


def test_gpu_launcher_main_container_slots_and_user_bootstrap() -> None:
    doc = document()
    doc["spec"]["slotsPerWorker"] = 4
    doc["spec"]["mainContainer"] = "mpi-worker"
    launcher = doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["resources"]["limits"]["nvidia.com/gpu"] = 1
    launcher["env"] = [
        {"name": "I_MPI_HYDRA_BOOTSTRAP", "value": "ssh"},
        {"name": "OMPI_MCA_orte_default_hostfile", "value": "/mine"},
    ]
    worker = doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker.pop("command")
    worker.pop("args")
    rendered = render_job(parse_job(doc))
    data = rendered.config_maps[0].data
    assert data["hostfile"] == "pi-launcher slots=4\npi-worker-0 slots=4\npi-worker-1 slots=4\n"
    assert data["discover_hosts.sh"] == "#!/bin/sh\necho pi-launcher:4"
    assert "kubectl exec ${POD_NAME} --container mpi-worker -- /bin/sh" in data["kubexec.sh"]
    launcher_pod, worker0, _ = rendered.pods
    env = env_of(launcher_pod)
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert env["I_MPI_HYDRA_BOOTSTRAP"] == "ssh"
    assert env["I_MPI_HYDRA_BOOTSTRAP_EXEC"] == "/etc/mpi/kubexec.sh"
    # Only Intel MPI's bootstrap is the user's to choose: the hostfile is the job's.
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    names = [e.name for e in launcher_pod.spec.containers[0].env or []]
    assert len(names) == len(set(names))
    assert worker0.spec.containers[0].command == ["sleep"]
    assert worker0.spec.containers[0].args == ["365d"]
    assert worker0.default_container == "mpi-worker"


def test_discover_hosts_lists_the_running_workers_sorted_by_name_as_upstream() -> None:
    doc = document()
    doc["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 12
    job = parse_job(doc)

    def script(*running: str) -> str:
        (config,) = config_map_plans(job, running=running)
        assert config.data["hostfile"].count("slots=1") == 12  # the hostfile never changes
        return config.data["discover_hosts.sh"]

    assert script() == "#!/bin/sh"
    # Upstream sorts the pods by name (pkg/controller.v1/mpi: updateDiscoverHostsInConfigMap):
    # worker-10 before worker-2. The launcher and unknown names are not workers.
    assert script("pi-worker-2", "pi-launcher", "pi-worker-10", "someone-else") == (
        "#!/bin/sh\necho pi-worker-10:1\necho pi-worker-2:1"
    )


def test_workers_default_to_none_and_launcher_to_one() -> None:
    doc = document()
    doc["spec"]["mpiReplicaSpecs"]["Worker"].pop("replicas")
    doc["spec"]["mpiReplicaSpecs"]["Launcher"].pop("replicas")
    rendered = render_job(parse_job(doc))
    assert [p.name for p in rendered.pods] == ["pi-launcher"]
    assert rendered.config_maps[0].data["hostfile"] == ""


def test_deprecated_clean_pod_policy_applies_when_run_policy_has_none() -> None:
    doc = document()
    doc["spec"]["cleanPodPolicy"] = "All"
    assert parse_job(doc).run_policy.cleanPodPolicy == "Running"
    doc["spec"]["runPolicy"].pop("cleanPodPolicy")
    job = parse_job(doc)
    assert job.run_policy.cleanPodPolicy == "All"
    assert job.run_policy.ttlSecondsAfterFinished == 60


def test_success_is_the_launcher() -> None:
    job = parse_job(document())
    assert ADAPTER.succeeded(
        job, {"Launcher": ReplicaCounts(1, succeeded=1), "Worker": ReplicaCounts(2, active=2)}
    )
    assert not ADAPTER.succeeded(
        job, {"Launcher": ReplicaCounts(1, active=1), "Worker": ReplicaCounts(2, succeeded=2)}
    )


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda s: s.pop("Launcher"),
            "spec.mpiReplicaSpecs.Launcher: must be present (got ['Worker'])",
        ),
        (
            lambda s: s["Launcher"].update(replicas=2),
            "spec.mpiReplicaSpecs.Launcher.replicas: must be 1 (got 2)",
        ),
        (
            lambda s: s.update(Master=s["Launcher"]),
            "replica type 'Master' is not valid for MPIJob; allowed: Launcher, Worker",
        ),
        (
            lambda s: s["Worker"]["template"]["spec"]["containers"][0].pop("image"),
            "containers.0.image: field required",
        ),
        (
            lambda s: s["Worker"]["template"]["spec"]["containers"][0].update(name=""),
            "containers.0.name: String should have at least 1 character",
        ),
    ],
)
def test_validation_names_field_and_value(mutate: Any, expected: str) -> None:
    doc = document()
    mutate(doc["spec"]["mpiReplicaSpecs"])
    with pytest.raises(JobInvalid) as caught:
        parse_job(doc)
    assert expected in str(caught.value)


def test_variables_mounts_and_idle_command_go_to_the_first_container() -> None:
    # Upstream decorates Containers[0] of the launcher and of each worker, whatever the
    # containers are named and whatever mainContainer says (that names kubexec's target).
    doc = document()
    doc["spec"]["mainContainer"] = "mpi"
    specs = doc["spec"]["mpiReplicaSpecs"]
    side = {"name": "side", "image": "example/side:1", "command": ["sleep", "1"]}
    launcher = specs["Launcher"]["template"]["spec"]["containers"]
    launcher.insert(0, dict(side))
    worker = specs["Worker"]["template"]["spec"]["containers"]
    worker[0]["name"] = "mpi"
    worker.insert(0, {"name": "first", "image": "example/first:1"})
    launcher_pod, worker0, _ = render_job(parse_job(doc)).pods
    first, mpi = launcher_pod.spec.containers
    assert first.name == "side" and env_of(launcher_pod)["OMPI_MCA_plm_rsh_agent"]
    assert {m["mountPath"] for m in mounts_of(launcher_pod)} == {"/opt/kube", "/etc/mpi"}
    assert not mpi.env and not getattr(mpi, "volumeMounts", None)
    idle, mpi_worker = worker0.spec.containers
    assert idle.name == "first" and idle.command == ["sleep"] and idle.args == ["365d"]
    assert [m["mountPath"] for m in mounts_of(worker0)] == ["/etc/mpi"]
    assert not getattr(mpi_worker, "volumeMounts", None)
