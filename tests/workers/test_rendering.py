"""What rendering guarantees for every kind: names, labels, services, ports, policies, and
`trainhub render` showing all of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from schemas.job_parsing import parse_job
from schemas.kubeflow import JOB_CLASSES
from trainhub.cli import app
from workers.backends.pod_env import process_spec
from workers.frameworks import ADAPTERS, UnsupportedKind, adapter_for
from workers.rendering import (
    LABEL_ATTEMPT,
    LABEL_JOB_NAME,
    LABEL_JOB_ROLE,
    LABEL_JOB_UID,
    LABEL_OPERATOR,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
    render_job,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "kubeflow"
EXAMPLES = sorted(DATA.glob("*.yaml"))


def document(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def test_every_kind_has_an_adapter() -> None:
    assert set(ADAPTERS) == set(JOB_CLASSES)
    for kind, cls in JOB_CLASSES.items():
        adapter = ADAPTERS[kind]
        assert adapter.default_container == cls.DEFAULT_CONTAINER
    with pytest.raises(UnsupportedKind, match="MXJob"):
        adapter_for("MXJob")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_objects_are_named_and_labelled(path: Path) -> None:
    job = parse_job(document(path))
    rendered = render_job(job, attempt=3)
    assert len(rendered.pods) == job.total_replicas
    names = [p.name for p in rendered.pods]
    assert len(set(names)) == len(names)
    for pod in rendered.pods:
        assert pod.namespace == job.metadata.namespace
        assert pod.labels[LABEL_JOB_NAME] == job.metadata.name
        assert pod.labels[LABEL_REPLICA_TYPE] == pod.replica_type.lower()
        # As upstream's: the one MPI launcher has no index label.
        launcher = job.kind == "MPIJob" and pod.replica_type == "Launcher"
        assert pod.labels.get(LABEL_REPLICA_INDEX) == (None if launcher else str(pod.index))
        assert pod.labels[LABEL_OPERATOR] == "trainhub"
        assert pod.labels[LABEL_JOB_UID] == job.uid
        assert pod.labels[LABEL_ATTEMPT] == "3"
        policy = job.replica_specs[pod.replica_type].restartPolicy
        assert pod.restart_policy == (policy or rendered.adapter.default_restart_policy)
        assert pod.spec.restartPolicy == ("Never" if policy == "ExitCode" else pod.restart_policy)
        assert pod.default_container in [c.name for c in pod.spec.containers]
    masters = [p.name for p in rendered.pods if p.labels.get(LABEL_JOB_ROLE) == "master"]
    # Exactly one master-role pod, except a collective PaddleJob (its role is the Master's).
    assert len(masters) == (0 if path.stem == "paddle-collective" else 1)
    for config in rendered.config_maps:
        assert config.namespace == job.metadata.namespace
        assert config.labels[LABEL_JOB_UID] == job.uid


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_one_headless_service_per_pod_selecting_it(path: Path) -> None:
    rendered = render_job(parse_job(document(path)))
    if not rendered.adapter.creates_services:
        assert rendered.services == []
        return
    assert [s.name for s in rendered.services] == [p.name for p in rendered.pods]
    for service, pod in zip(rendered.services, rendered.pods, strict=True):
        assert service.selector.items() <= pod.labels.items()
        assert LABEL_JOB_ROLE not in service.labels
        others = [p for p in rendered.pods if p is not pod]
        assert not any(service.selector.items() <= o.labels.items() for o in others)
        manifest = service.manifest()
        assert manifest["spec"]["clusterIP"] == "None"
        port = rendered.adapter.port_of(rendered.job, pod.replica_type)
        assert (rendered.adapter.port_name, port) in service.ports


def test_default_port_goes_to_the_default_container_once() -> None:
    doc = document(DATA / "jax-simple.yaml")
    containers = doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    containers.insert(0, {"name": "sidecar", "image": "example/sidecar:1"})
    containers[1]["ports"] = [{"name": "metrics", "containerPort": 9090}]
    rendered = render_job(parse_job(doc))
    pod = rendered.pods[0]
    sidecar, jax = pod.spec.containers
    assert sidecar.ports is None
    assert [(p.name, p.containerPort) for p in jax.ports or []] == [
        ("metrics", 9090),
        ("jaxjob-port", 6666),
    ]
    assert pod.default_container == "jax"
    # What `trainhub render` prints is what the kube backend creates: kubectl logs and exec
    # (and MPI's kubexec.sh) reach the framework's container, not the sidecar.
    annotations = pod.manifest()["metadata"]["annotations"]
    assert annotations["kubectl.kubernetes.io/default-container"] == "jax"
    # The service publishes every named port of the default container.
    assert rendered.services[0].ports == [("metrics", 9090), ("jaxjob-port", 6666)]
    # The env goes into every container of a JAX pod, as upstream does.
    assert {e.name for e in sidecar.env or []} == {e.name for e in jax.env or []}


def test_injected_variables_hold_over_the_users_and_come_first() -> None:
    # Upstream appends its values after the user's and the kubelet keeps the last of a name:
    # a PROCESS_ID copied from a local run must not give every worker the same id.
    doc = document(DATA / "jax-simple.yaml")
    doc["spec"]["jaxReplicaSpecs"]["Worker"]["replicas"] = 2
    container = doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["env"] = [
        {"name": "PROCESS_ID", "value": "7"},
        {"name": "EXTRA", "value": "x"},
        {"name": "COORDINATOR", "value": "$(COORDINATOR_ADDRESS):$(COORDINATOR_PORT)"},
    ]
    pods = render_job(parse_job(doc)).pods
    envs = [[(e.name, e.value) for e in pod.spec.containers[0].env or []] for pod in pods]
    assert envs[1] == [
        ("PYTHONUNBUFFERED", "1"),
        ("COORDINATOR_PORT", "6666"),
        ("COORDINATOR_ADDRESS", "jaxjob-simple-worker-0"),
        ("NUM_PROCESSES", "2"),
        ("PROCESS_ID", "1"),
        ("EXTRA", "x"),
        ("COORDINATOR", "$(COORDINATOR_ADDRESS):$(COORDINATOR_PORT)"),
    ]
    assert ("PROCESS_ID", "0") in envs[0] and ("PROCESS_ID", "7") not in envs[0]
    # The user's variables follow the injected ones, so they may refer to them.
    spec = process_spec(pods[1], pods[1].spec.containers[0], "node-0")
    assert spec.env["COORDINATOR"] == "jaxjob-simple-worker-0:6666"


def test_template_labels_annotations_and_init_containers_are_kept() -> None:
    doc = document(DATA / "pytorch-simple.yaml")
    template = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    template["metadata"] = {"labels": {"team": "vision"}, "annotations": {"note": "keep"}}
    template["spec"]["initContainers"] = [{"name": "fetch", "image": "example/fetch:1"}]
    rendered = render_job(parse_job(doc))
    worker = rendered.pods[1]
    assert worker.labels["team"] == "vision"
    gang = str(len(rendered.pods))
    assert worker.annotations == {"note": "keep", "trainhub.io/gang-size": gang}
    assert worker.manifest()["metadata"]["annotations"] == {
        "kubectl.kubernetes.io/default-container": "pytorch",
        "note": "keep",
        "trainhub.io/gang-size": gang,
    }
    assert [c.name for c in worker.spec.initContainers or []] == ["fetch", "init-pytorch"]


def test_init_image_can_be_chosen() -> None:
    job = parse_job(document(DATA / "pytorch-simple.yaml"))
    worker = render_job(job, init_image="busybox:1.36").pods[1]
    assert [c.image for c in worker.spec.initContainers or []] == ["busybox:1.36"]


def test_manifests_list_access_config_maps_services_then_pods() -> None:
    for path in EXAMPLES:
        kinds = [m["kind"] for m in render_job(parse_job(document(path))).manifests()]
        order = {
            "ServiceAccount": 0,
            "Role": 1,
            "RoleBinding": 2,
            "ConfigMap": 3,
            "Service": 4,
            "Pod": 5,
        }
        assert kinds == sorted(kinds, key=order.__getitem__), path.stem


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_cli_render_shows_every_object(path: Path) -> None:
    result = CliRunner().invoke(app, ["render", str(path), "-o", "json"])
    assert result.exit_code == 0, result.output
    objects = json.loads(result.stdout)
    expected = render_job(parse_job(document(path))).manifests()
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        (m["kind"], m["metadata"]["name"]) for m in expected
    ]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("host_network", [True, False])
def test_the_hub_reads_the_host_ports_the_rendered_pods_hold(
    path: Path, host_network: bool
) -> None:
    """Placement reads host ports from the job (schemas), the pods are rendered here: both
    must agree, the port each kind adds included."""
    doc = document(path)
    kind = JOB_CLASSES[doc["kind"]]
    for rspec in doc["spec"][kind.REPLICA_FIELD].values():
        rspec["template"]["spec"]["hostNetwork"] = host_network
    job = parse_job(doc)
    pods = render_job(job).pods
    assert pods
    for pod in pods:
        assert pod.host_ports == job.host_ports(pod.replica_type), pod.name
    if host_network and getattr(kind, "ADDS_DEFAULT_PORT", False):
        assert any(pod.host_ports for pod in pods)
