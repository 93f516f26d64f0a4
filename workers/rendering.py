"""Turn a job into the Kubernetes objects a worker creates: pods, headless services, and the
ConfigMaps and API access (ServiceAccount, Role, RoleBinding) some kinds need, without ever
asking which kind it is."""

from __future__ import annotations

import base64
from collections.abc import Collection
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Any

from schemas.host_ports import pod_host_ports
from schemas.kubeflow import PYTORCH_INIT_RESOURCES, AnyJob
from schemas.pod import Container, ContainerPort, EnvVar, PodSpec
from workers.frameworks import adapter_for
from workers.frameworks.base import AccessRule, FrameworkAdapter
from workers.gang_scheduling import GangScheduling, PodGroupPlan, pod_group_plan
from workers.network import ClusterNetwork, Network

DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"

GROUP = "training.kubeflow.org"
LABEL_JOB_NAME = f"{GROUP}/job-name"
LABEL_REPLICA_TYPE = f"{GROUP}/replica-type"
LABEL_REPLICA_INDEX = f"{GROUP}/replica-index"
LABEL_OPERATOR = f"{GROUP}/operator-name"
LABEL_JOB_ROLE = f"{GROUP}/job-role"
LABEL_JOB_UID = "trainhub.io/job-uid"
LABEL_ATTEMPT = "trainhub.io/attempt"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
ANNOTATION_GANG_SIZE = "trainhub.io/gang-size"
"""On every pod: how many pods the job has, so a capacity read can tell a whole gang bound
from part of one."""
OPERATOR_NAME = "trainhub"
_RBAC_GROUP = "rbac.authorization.k8s.io"

INIT_CONTAINER_IMAGE = "alpine:3.10"
"""Upstream's default image for the container that waits for the master's name."""
INIT_CONTAINER_MAX_TRIES = 100
"""Upstream's default: 100 lookups two seconds apart."""


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
    master_address: tuple[str, int] | None = None
    """Where the master listens as this job's network reaches it, when this pod must not start
    before the master is reachable. `kube` pods carry an init container for it (unless rendered
    with `wait_for_master=False`); a backend without one waits for the port to accept
    connections before it starts the pod."""

    @property
    def requests(self) -> dict[str, Decimal]:
        return self.spec.total_requests()

    @cached_property
    def host_ports(self) -> frozenset[str]:
        """The host ports the pod holds on its node, as kube-scheduler counts them."""
        return pod_host_ports(self.spec.model_dump(mode="json", exclude_none=True))

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
                # kubectl logs/exec (and MPI's kubexec.sh) reach the framework's container
                # even where a sidecar comes first.
                "annotations": {DEFAULT_CONTAINER_ANNOTATION: self.default_container}
                | self.annotations,
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
    publish_not_ready: bool = False
    """`publishNotReadyAddresses`: its pods' names resolve before they are ready (JobSet's)."""

    def manifest(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "clusterIP": "None",
            "selector": self.selector,
            "ports": [{"name": n, "port": p, "targetPort": p} for n, p in self.ports],
        }
        if self.publish_not_ready:
            spec["publishNotReadyAddresses"] = True
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": self.labels},
            "spec": spec,
        }


@dataclass
class SecretPlan:
    name: str
    namespace: str
    labels: dict[str, str]
    type: str
    data: dict[str, str]
    immutable: bool = True

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": self.labels},
            "type": self.type,
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in self.data.items()},
            "immutable": self.immutable,
        }


@dataclass
class ConfigMapPlan:
    name: str
    namespace: str
    labels: dict[str, str]
    data: dict[str, str]

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": self.labels},
            "data": self.data,
        }


@dataclass
class AccessPlan:
    """A ServiceAccount, a Role and the RoleBinding between them, in the job's namespace."""

    name: str
    """The Role's and the RoleBinding's name."""
    namespace: str
    service_account: str
    labels: dict[str, str]
    rules: tuple[AccessRule, ...]

    def service_account_manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": self._metadata(self.service_account),
        }

    def role_manifest(self) -> dict[str, Any]:
        rules: list[dict[str, Any]] = []
        for rule in self.rules:
            entry: dict[str, Any] = {
                "apiGroups": [""],
                "resources": list(rule.resources),
                "verbs": list(rule.verbs),
            }
            if rule.resource_names:
                entry["resourceNames"] = list(rule.resource_names)
            rules.append(entry)
        return {
            "apiVersion": f"{_RBAC_GROUP}/v1",
            "kind": "Role",
            "metadata": self._metadata(self.name),
            "rules": rules,
        }

    def role_binding_manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{_RBAC_GROUP}/v1",
            "kind": "RoleBinding",
            "metadata": self._metadata(self.name),
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": self.service_account,
                    "namespace": self.namespace,
                }
            ],
            "roleRef": {"apiGroup": _RBAC_GROUP, "kind": "Role", "name": self.name},
        }

    def manifests(self) -> list[dict[str, Any]]:
        """In creation order: a RoleBinding's subject and role exist before it does."""
        return [
            self.service_account_manifest(),
            self.role_manifest(),
            self.role_binding_manifest(),
        ]

    def _metadata(self, name: str) -> dict[str, Any]:
        return {"name": name, "namespace": self.namespace, "labels": dict(self.labels)}


@dataclass
class RenderedJob:
    job: AnyJob
    adapter: FrameworkAdapter
    pods: list[PodPlan] = field(default_factory=list)
    services: list[ServicePlan] = field(default_factory=list)
    """One per pod, named like it (created and deleted with it)."""
    job_services: list[ServicePlan] = field(default_factory=list)
    """The job's own, created before its pods and kept until the job goes (a TrainJob's
    JobSet-style headless Service, named after the job: its pods' subdomain)."""
    config_maps: list[ConfigMapPlan] = field(default_factory=list)
    """Created before the pods that mount them."""
    secrets: list[SecretPlan] = field(default_factory=list)
    """Created before the pods that mount them, never updated."""
    access: list[AccessPlan] = field(default_factory=list)
    """Created before the pods that run under their ServiceAccounts."""
    pod_group: PodGroupPlan | None = None
    """With a gang scheduler: created before the first pod, deleted when the job finishes
    or is suspended."""

    def manifests(self) -> list[dict[str, Any]]:
        group = [self.pod_group.manifest()] if self.pod_group is not None else []
        return (
            group
            + [m for a in self.access for m in a.manifests()]
            + [c.manifest() for c in self.config_maps]
            + [s.manifest() for s in self.secrets]
            + [s.manifest() for s in self.job_services]
            + [s.manifest() for s in self.services]
            + [p.manifest() for p in self.pods]
        )

    def pod(self, name: str) -> PodPlan | None:
        return next((p for p in self.pods if p.name == name), None)


def _own_labels(job: AnyJob, attempt: int) -> dict[str, str]:
    """trainhub's bookkeeping, by which a worker lists and deletes what it made."""
    return {LABEL_JOB_UID: job.uid, LABEL_ATTEMPT: str(attempt), LABEL_MANAGED: OPERATOR_NAME}


def _job_labels(job: AnyJob, attempt: int) -> dict[str, str]:
    return {
        LABEL_JOB_NAME: job.metadata.name,
        LABEL_OPERATOR: OPERATOR_NAME,
        **_own_labels(job, attempt),
    }


def _labels(
    job: AnyJob, rtype: str, index: int, attempt: int, *, with_index: bool = True
) -> dict[str, str]:
    labels = {LABEL_JOB_NAME: job.metadata.name, LABEL_REPLICA_TYPE: rtype.lower()}
    if with_index:
        labels[LABEL_REPLICA_INDEX] = str(index)
    return labels | _job_labels(job, attempt)


def _with_environment(container: Container, injected: list[EnvVar]) -> Container:
    """Injected variables first, then the user's own, less those of an injected name.

    Upstream appends its variables after the user's and the kubelet keeps the last of a
    name, so the operator's value is the one a pod sees: a RANK or MASTER_ADDR copied into the
    template from a local run must not give every pod the same identity. Listed first, the
    injected values can be referenced by the user's as `$(NAME)`."""
    if not injected:
        return container
    names = {e.name for e in injected}
    env = injected + [e for e in container.env or [] if e.name not in names]
    return container.model_copy(update={"env": env})


def _with_port(container: Container, name: str, port: int) -> Container:
    ports = list(container.ports or [])
    if any(p.name == name for p in ports):
        return container
    return container.model_copy(
        update={"ports": [*ports, ContainerPort(name=name, containerPort=port)]}
    )


def _wait_for_master(adapter: FrameworkAdapter, host: str, image: str) -> Container:
    """Upstream's init container: retry `nslookup` of the master's Service until it resolves."""
    script = (
        f"err=1;for i in $(seq {INIT_CONTAINER_MAX_TRIES}); do if nslookup {host}; "
        "then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err"
    )
    return Container.model_validate(
        {
            "name": f"init-{adapter.default_container}",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "resources": {k: dict(v) for k, v in PYTORCH_INIT_RESOURCES.items()},
            "command": ["sh", "-c", script],
        }
    )


def _pod_plan(
    job: AnyJob,
    adapter: FrameworkAdapter,
    rtype: str,
    index: int,
    net: Network,
    *,
    attempt: int,
    wait_for_master: bool,
    init_image: str,
) -> PodPlan:
    template = job.replica_specs[rtype].template
    namespace = job.metadata.namespace
    with_index = adapter.labels_index(job, rtype)
    labels = {
        **(template.metadata.labels or {}),
        **_labels(job, rtype, index, attempt, with_index=with_index),
    }
    if adapter.is_master(job, rtype, index):
        labels[LABEL_JOB_ROLE] = "master"
    env = adapter.environment(job, rtype, index, net)
    main = adapter.main_container(job, rtype)
    env_target = adapter.env_container(job, rtype)
    containers = []
    for container in template.spec.containers:
        updated = container
        if adapter.env_in_every_container or container.name == env_target:
            updated = _with_environment(updated, env)
        if container.name == main and adapter.injects_default_port:
            updated = _with_port(updated, adapter.port_name, adapter.port_of(job, rtype))
        containers.append(updated)
    policy = adapter.restart_policy(job, rtype)
    update: dict[str, Any] = {
        "containers": containers,
        "restartPolicy": "Never" if policy == "ExitCode" else policy,
    }
    master_address = None
    master = adapter.master_endpoint(job)
    if master is not None and adapter.waits_for_master(job, rtype, index):
        host = net.host(master.service, namespace)
        master_address = (host, net.port(master.service, master.port))
        if wait_for_master:
            init = _wait_for_master(adapter, host, init_image)
            update["initContainers"] = [*(template.spec.initContainers or []), init]
    spec = adapter.decorate_pod(job, rtype, index, template.spec.model_copy(update=update))
    return PodPlan(
        name=adapter.pod_name(job, rtype, index),
        namespace=namespace,
        replica_type=rtype,
        index=index,
        labels=labels,
        annotations=dict(template.metadata.annotations or {}),
        spec=spec,
        restart_policy=policy,
        default_container=main,
        master_address=master_address,
    )


def _service_plan(pod: PodPlan) -> ServicePlan:
    """Headless, selecting exactly its pod, publishing the main container's named ports.
    As upstream's: labelled with its selector only (not the template's labels), plus
    trainhub's own."""
    keys = (LABEL_OPERATOR, LABEL_JOB_NAME, LABEL_REPLICA_TYPE, LABEL_REPLICA_INDEX)
    selector = {k: pod.labels[k] for k in keys}
    ports = [(p.name, p.containerPort) for p in pod.main_container.ports or [] if p.name]
    own = (LABEL_JOB_UID, LABEL_ATTEMPT, LABEL_MANAGED)
    return ServicePlan(
        name=pod.name,
        namespace=pod.namespace,
        labels=selector | {k: pod.labels[k] for k in own},
        selector=selector,
        ports=ports,
    )


def config_map_plans(
    job: AnyJob, attempt: int = 1, running: Collection[str] = ()
) -> list[ConfigMapPlan]:
    """The job's ConfigMaps while the pods named in `running` run (none: as first created)."""
    return [
        ConfigMapPlan(
            name=config.name,
            namespace=job.metadata.namespace,
            labels={**config.labels, **_own_labels(job, attempt)},
            data=config.data,
        )
        for config in adapter_for(job.kind).config_maps(job, running)
    ]


def render_job(
    job: AnyJob,
    net: Network | None = None,
    *,
    attempt: int = 1,
    wait_for_master: bool = True,
    init_image: str = INIT_CONTAINER_IMAGE,
    gang: GangScheduling | None = None,
) -> RenderedJob:
    """Every object the worker will create for the job, with each framework's environment.

    `wait_for_master=False` leaves out the init container that holds workers until the
    master's name resolves, for backends that cannot run one (they use `master_address`).
    `gang`: the job gets a PodGroup, and every pod joins it (see `_join_gang`)."""
    adapter = adapter_for(job.kind)
    net = net or ClusterNetwork()
    rendered = RenderedJob(job=job, adapter=adapter)
    rendered.config_maps = config_map_plans(job, attempt)
    rendered.secrets = [
        SecretPlan(
            name=secret.name,
            namespace=job.metadata.namespace,
            labels=_own_labels(job, attempt),
            type=secret.type,
            data=secret.data,
            immutable=secret.immutable,
        )
        for secret in adapter.secrets(job)
    ]
    for access in adapter.access(job):
        rendered.access.append(
            AccessPlan(
                name=access.name,
                namespace=job.metadata.namespace,
                service_account=access.service_account,
                labels={**access.labels, **_own_labels(job, attempt)},
                rules=access.rules,
            )
        )
    subdomain = adapter.subdomain(job)
    if subdomain is not None:
        selector = {
            LABEL_JOB_NAME: job.metadata.name,
            LABEL_OPERATOR: OPERATOR_NAME,
            LABEL_JOB_UID: job.uid,
        }
        rendered.job_services.append(
            ServicePlan(
                name=subdomain,
                namespace=job.metadata.namespace,
                labels=_job_labels(job, attempt),
                selector=selector,
                ports=[],
                publish_not_ready=True,
            )
        )
    for rtype in job.replica_specs:
        for index in range(job.replicas_of(rtype)):
            pod = _pod_plan(
                job,
                adapter,
                rtype,
                index,
                net,
                attempt=attempt,
                wait_for_master=wait_for_master,
                init_image=init_image,
            )
            rendered.pods.append(pod)
            if adapter.creates_services:
                rendered.services.append(_service_plan(pod))
    _reach_own_services(rendered, net)
    size = str(len(rendered.pods))
    for pod in rendered.pods:
        pod.annotations[ANNOTATION_GANG_SIZE] = size
    if gang is not None:
        rendered.pod_group = pod_group_plan(job, gang, _job_labels(job, attempt))
        for pod in rendered.pods:
            _join_gang(pod, gang, rendered.pod_group.name)
    return rendered


_SERVICE_SUFFIXES = ("", ".{ns}", ".{ns}.svc", ".{ns}.svc.cluster.local")


def _reach_own_services(rendered: RenderedJob, net: Network) -> None:
    """A variable whose value names one of the job's own Services (`<service>`, or
    `<pod>.<subdomain>` where the job's pods have one, with `.<namespace>[.svc[.cluster.local]]`
    or not, with `:<port>` or not: what a user writes
    where no operator injects a peer's address, as a TrainJob on the plain runtime) gets the
    address under which this network reaches it. Cluster DNS resolves the names as written;
    on `local` they become 127.0.0.1 and the job's own port for that Service."""
    namespace = rendered.job.metadata.namespace
    names = {s.name for s in rendered.services}
    if all(net.host(name, namespace) == name for name in names):
        return  # names resolve where the pods run
    # A pod's name under its job's subdomain (`<pod>.<subdomain>`, JobSet's DNS hostnames)
    # reaches the pod as its own Service does.
    subdomain = rendered.adapter.subdomain(rendered.job)
    qualified = [""] if subdomain is None else ["", f".{subdomain}"]
    written = {
        name + under + suffix.format(ns=namespace): name
        for name in names
        for under in qualified
        for suffix in _SERVICE_SUFFIXES
    }

    def reached(value: str) -> str | None:
        host, colon, port = value.rpartition(":") if ":" in value else (value, "", "")
        service = written.get(host)
        if service is None or (colon and not port.isdigit()):
            return None
        address = net.host(service, namespace)
        return f"{address}:{net.port(service, int(port))}" if colon else address

    for pod in rendered.pods:
        containers = []
        for container in pod.spec.containers:
            env = [
                e.model_copy(update={"value": reached(e.value)})
                if e.value is not None and reached(e.value) is not None
                else e
                for e in container.env or []
            ]
            containers.append(container.model_copy(update={"env": env}) if env else container)
        pod.spec = pod.spec.model_copy(update={"containers": containers})


def _join_gang(pod: PodPlan, gang: GangScheduling, group: str) -> None:
    """As upstream decorates a pod template: the gang scheduler's name unless the template
    names a scheduler of its own (kept, as upstream keeps it), and the group's label or
    annotations."""
    pod.labels.update(gang.pod_labels(group))
    pod.annotations.update(gang.pod_annotations(group, pod.replica_type))
    if not (pod.spec.model_extra or {}).get("schedulerName"):
        pod.spec = pod.spec.model_copy(update={"schedulerName": gang.scheduler_name})
