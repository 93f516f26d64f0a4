"""Turn a job into the Kubernetes objects a worker creates: pods and headless services."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from schemas.kubeflow import AnyJob
from schemas.pod import Container, ContainerPort, EnvVar, PodSpec
from workers.frameworks import adapter_for
from workers.frameworks.base import FrameworkAdapter, service_name
from workers.network import ClusterNetwork, Network

GROUP = "training.kubeflow.org"
LABEL_JOB_NAME = f"{GROUP}/job-name"
LABEL_REPLICA_TYPE = f"{GROUP}/replica-type"
LABEL_REPLICA_INDEX = f"{GROUP}/replica-index"
LABEL_OPERATOR = f"{GROUP}/operator-name"
LABEL_JOB_ROLE = f"{GROUP}/job-role"
LABEL_JOB_UID = "trainhub.io/job-uid"
LABEL_ATTEMPT = "trainhub.io/attempt"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
OPERATOR_NAME = "trainhub"


@dataclass
class PodPlan:
    name: str
    namespace: str
    replica_type: str
    index: int
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: PodSpec
    restart_policy: str
    """The replica's policy, ExitCode included (the pod itself gets Never for ExitCode)."""
    default_container: str

    @property
    def requests(self) -> dict[str, Decimal]:
        return self.spec.total_requests()

    @property
    def main_container(self) -> Container:
        return next(
            (c for c in self.spec.containers if c.name == self.default_container),
            self.spec.containers[0],
        )

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": self.labels,
                "annotations": self.annotations,
            },
            "spec": self.spec.model_dump(mode="json", exclude_none=True),
        }


@dataclass
class ServicePlan:
    name: str
    namespace: str
    labels: dict[str, str]
    selector: dict[str, str]
    ports: list[tuple[str, int]]

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": self.labels},
            "spec": {
                "clusterIP": "None",
                "selector": self.selector,
                "ports": [{"name": n, "port": p, "targetPort": p} for n, p in self.ports],
            },
        }


@dataclass
class RenderedJob:
    job: AnyJob
    adapter: FrameworkAdapter
    pods: list[PodPlan] = field(default_factory=list)
    services: list[ServicePlan] = field(default_factory=list)

    def manifests(self) -> list[dict[str, Any]]:
        return [s.manifest() for s in self.services] + [p.manifest() for p in self.pods]

    def pod(self, name: str) -> PodPlan | None:
        return next((p for p in self.pods if p.name == name), None)


def _labels(job: AnyJob, rtype: str, index: int, attempt: int) -> dict[str, str]:
    return {
        LABEL_JOB_NAME: job.metadata.name,
        LABEL_REPLICA_TYPE: rtype.lower(),
        LABEL_REPLICA_INDEX: str(index),
        LABEL_OPERATOR: OPERATOR_NAME,
        LABEL_JOB_UID: job.uid,
        LABEL_ATTEMPT: str(attempt),
        LABEL_MANAGED: OPERATOR_NAME,
    }


def _with_environment(container: Container, injected: dict[str, str]) -> Container:
    """Injected variables first; a variable the user set keeps the user's value."""
    own = list(container.env or [])
    names = {e.name for e in own}
    env = [EnvVar(name=k, value=v) for k, v in injected.items() if k not in names] + own
    return container.model_copy(update={"env": env})


def _with_port(container: Container, name: str, port: int) -> Container:
    ports = list(container.ports or [])
    if any(p.name == name for p in ports):
        return container
    return container.model_copy(
        update={"ports": [*ports, ContainerPort(name=name, containerPort=port)]}
    )


def _pod_plan(
    job: AnyJob, adapter: FrameworkAdapter, rtype: str, index: int, net: Network, attempt: int
) -> PodPlan:
    template = job.replica_specs[rtype].template
    labels = {**(template.metadata.labels or {}), **_labels(job, rtype, index, attempt)}
    if adapter.is_master(job, rtype, index):
        labels[LABEL_JOB_ROLE] = "master"
    env = adapter.environment(job, rtype, index, net)
    names = [c.name for c in template.spec.containers]
    main = adapter.default_container if adapter.default_container in names else names[0]
    port = adapter.port_of(job, rtype)
    containers = []
    for container in template.spec.containers:
        updated = _with_environment(container, env)
        if container.name == main and adapter.creates_services:
            updated = _with_port(updated, adapter.port_name, port)
        containers.append(updated)
    policy = adapter.restart_policy(job, rtype)
    spec = template.spec.model_copy(
        update={
            "containers": containers,
            "restartPolicy": "Never" if policy == "ExitCode" else policy,
        }
    )
    return PodPlan(
        name=service_name(job, rtype, index),
        namespace=job.metadata.namespace,
        replica_type=rtype,
        index=index,
        labels=labels,
        annotations=dict(template.metadata.annotations or {}),
        spec=spec,
        restart_policy=policy,
        default_container=main,
    )


def render_job(job: AnyJob, net: Network | None = None, *, attempt: int = 1) -> RenderedJob:
    """Every object the worker will create for the job, with each framework's environment."""
    adapter = adapter_for(job.kind)
    net = net or ClusterNetwork()
    rendered = RenderedJob(job=job, adapter=adapter)
    for rtype in job.replica_specs:
        for index in range(job.replicas_of(rtype)):
            pod = _pod_plan(job, adapter, rtype, index, net, attempt)
            rendered.pods.append(pod)
            if adapter.creates_services:
                selector = {
                    k: pod.labels[k]
                    for k in (LABEL_JOB_NAME, LABEL_REPLICA_TYPE, LABEL_REPLICA_INDEX)
                }
                rendered.services.append(
                    ServicePlan(
                        name=pod.name,
                        namespace=pod.namespace,
                        labels={k: v for k, v in pod.labels.items() if k != LABEL_JOB_ROLE},
                        selector=selector,
                        ports=[(adapter.port_name, adapter.port_of(job, rtype))],
                    )
                )
    return rendered
