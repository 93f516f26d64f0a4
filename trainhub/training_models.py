"""Job objects shaped as kubeflow-training 1.9's models, for `TrainingClient`: the same class
names, attribute names (snake_case), positional order, `to_dict()` (snake_case keys) and
equality, with the kubernetes models a training script builds jobs from. No kubeflow or
kubernetes package is needed; their own model objects are accepted wherever these are
(trainhub.training_documents reads and writes documents as these objects)."""

from __future__ import annotations

import pprint
import re
from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "KubeflowOrgV1ElasticPolicy",
    "KubeflowOrgV1JAXJob",
    "KubeflowOrgV1JAXJobSpec",
    "KubeflowOrgV1JobCondition",
    "KubeflowOrgV1JobStatus",
    "KubeflowOrgV1MPIJob",
    "KubeflowOrgV1MPIJobSpec",
    "KubeflowOrgV1PaddleElasticPolicy",
    "KubeflowOrgV1PaddleJob",
    "KubeflowOrgV1PaddleJobSpec",
    "KubeflowOrgV1PyTorchJob",
    "KubeflowOrgV1PyTorchJobSpec",
    "KubeflowOrgV1RDZVConf",
    "KubeflowOrgV1ReplicaSpec",
    "KubeflowOrgV1ReplicaStatus",
    "KubeflowOrgV1RunPolicy",
    "KubeflowOrgV1SchedulingPolicy",
    "KubeflowOrgV1TFJob",
    "KubeflowOrgV1TFJobSpec",
    "KubeflowOrgV1XGBoostJob",
    "KubeflowOrgV1XGBoostJobSpec",
    "V1Container",
    "V1ContainerPort",
    "V1DeleteOptions",
    "V1EnvVar",
    "V1ObjectMeta",
    "V1Pod",
    "V1PodSpec",
    "V1PodStatus",
    "V1PodTemplateSpec",
    "V1Preconditions",
    "V1ResourceRequirements",
]
"""Upstream's names (what `from trainhub.training_client import *` brings, as
`from kubeflow.training import *` does)."""


def names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_SPECIAL = {
    "host_ipc": "hostIPC",
    "host_pid": "hostPID",
    "host_ip": "hostIP",
    "host_ips": "hostIPs",
    "pod_ip": "podIP",
    "pod_ips": "podIPs",
    "cluster_ip": "clusterIP",
    "cluster_ips": "clusterIPs",
    "external_ips": "externalIPs",
    "load_balancer_ip": "loadBalancerIP",
    "_continue": "continue",
    "_except": "except",
}
_SPECIAL_BACK = {key: attribute for attribute, key in _SPECIAL.items()}
ONE, LIST, MAP = "one", "list", "map"


def camel(attribute: str) -> str:
    """`pytorch_replica_specs` -> `pytorchReplicaSpecs` (`host_ipc` -> `hostIPC`)."""
    if attribute in _SPECIAL:
        return _SPECIAL[attribute]
    head, *rest = attribute.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def snake(key: str) -> str:
    """`pytorchReplicaSpecs` -> `pytorch_replica_specs`."""
    if key in _SPECIAL_BACK:
        return _SPECIAL_BACK[key]
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


class Model:
    """An openapi-style model: declared attributes (None unless given, in `_fields` order for
    positional arguments), `to_dict()`, `to_str()`, equality by content."""

    _fields: ClassVar[tuple[str, ...]] = ()
    _children: ClassVar[Mapping[str, tuple[type[Model], str]]] = {}
    _open: ClassVar[bool] = False
    """Accepts attributes beyond `_fields` (kubernetes' pod and container specs are long)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        name = type(self).__name__
        if len(args) > len(self._fields):
            raise TypeError(f"{name}() takes at most {len(self._fields)} positional arguments")
        values = dict(zip(self._fields, args, strict=False))
        for key, value in kwargs.items():
            if key in values:
                raise TypeError(f"{name}() got multiple values for argument {key!r}")
            if key not in self._fields and not self._open:
                raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
            values[key] = value
        object.__setattr__(self, "_keys", {})
        for field in self._fields:
            setattr(self, field, values.pop(field, None))
        for key, value in values.items():
            setattr(self, key, value)

    def __getattr__(self, name: str) -> Any:
        # Only for attributes never set: declared ones always are.
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def attributes(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def to_dict(self) -> dict[str, Any]:
        """The attributes, nested models as dicts too (snake_case keys, as upstream's)."""
        return {k: _plain(v) for k, v in self.attributes().items()}

    def to_str(self) -> str:
        return pprint.pformat(self.to_dict())

    def __repr__(self) -> str:
        return self.to_str()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_dict() == other.to_dict()

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]


def _plain(value: Any) -> Any:
    if isinstance(value, Model):
        return value.to_dict()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


class Object(Model):
    """A part of a document no class here declares: its keys as attributes."""

    _open = True


# -- kubernetes models a training script uses -------------------------------------------------


class V1ObjectMeta(Model):
    _fields = names(
        "annotations creation_timestamp deletion_grace_period_seconds deletion_timestamp "
        "finalizers generate_name generation labels managed_fields name namespace "
        "owner_references resource_version self_link uid"
    )


class V1EnvVar(Model):
    _fields = names("name value value_from")


class V1ResourceRequirements(Model):
    _fields = names("claims limits requests")


class V1ContainerPort(Model):
    _fields = names("container_port host_ip host_port name protocol")


class V1Container(Model):
    _fields = names(
        "args command env env_from image image_pull_policy name ports resources volume_mounts "
        "working_dir"
    )
    _children = {
        "env": (V1EnvVar, LIST),
        "ports": (V1ContainerPort, LIST),
        "resources": (V1ResourceRequirements, ONE),
    }
    _open = True


class V1PodSpec(Model):
    _fields = names(
        "affinity containers host_network image_pull_secrets init_containers node_name "
        "node_selector priority_class_name restart_policy scheduler_name service_account_name "
        "tolerations volumes"
    )
    _children = {"containers": (V1Container, LIST), "init_containers": (V1Container, LIST)}
    _open = True


class V1PodTemplateSpec(Model):
    _fields = names("metadata spec")
    _children = {"metadata": (V1ObjectMeta, ONE), "spec": (V1PodSpec, ONE)}


class V1PodStatus(Model):
    _fields = names(
        "conditions container_statuses ephemeral_container_statuses host_ip host_ips "
        "init_container_statuses message nominated_node_name phase pod_ip pod_ips qos_class "
        "reason resize resource_claim_statuses start_time"
    )
    _open = True


class V1Pod(Model):
    _fields = names("api_version kind metadata spec status")
    _children = {
        "metadata": (V1ObjectMeta, ONE),
        "spec": (V1PodSpec, ONE),
        "status": (V1PodStatus, ONE),
    }


class V1Preconditions(Model):
    _fields = names("resource_version uid")


class V1DeleteOptions(Model):
    _fields = names(
        "api_version dry_run grace_period_seconds kind orphan_dependents preconditions "
        "propagation_policy"
    )
    _children = {"preconditions": (V1Preconditions, ONE)}


# -- kubeflow.org/v1 --------------------------------------------------------------------------


class KubeflowOrgV1SchedulingPolicy(Model):
    _fields = names("min_available min_resources priority_class queue schedule_timeout_seconds")


class KubeflowOrgV1RunPolicy(Model):
    _fields = names(
        "active_deadline_seconds backoff_limit clean_pod_policy managed_by scheduling_policy "
        "suspend ttl_seconds_after_finished"
    )
    _children = {"scheduling_policy": (KubeflowOrgV1SchedulingPolicy, ONE)}


class KubeflowOrgV1ReplicaSpec(Model):
    _fields = names("replicas restart_policy template")
    _children = {"template": (V1PodTemplateSpec, ONE)}


class KubeflowOrgV1RDZVConf(Model):
    _fields = names("key value")


class KubeflowOrgV1ElasticPolicy(Model):
    _fields = names(
        "max_replicas max_restarts metrics min_replicas n_proc_per_node rdzv_backend rdzv_conf "
        "rdzv_host rdzv_id rdzv_port standalone"
    )
    _children = {"rdzv_conf": (KubeflowOrgV1RDZVConf, LIST)}


class KubeflowOrgV1PaddleElasticPolicy(Model):
    _fields = names("max_replicas max_restarts metrics min_replicas")


class KubeflowOrgV1JobCondition(Model):
    _fields = names("last_transition_time last_update_time message reason status type")


class KubeflowOrgV1ReplicaStatus(Model):
    _fields = names("active failed label_selector selector succeeded")


class KubeflowOrgV1JobStatus(Model):
    _fields = names("completion_time conditions last_reconcile_time replica_statuses start_time")
    _children = {
        "conditions": (KubeflowOrgV1JobCondition, LIST),
        "replica_statuses": (KubeflowOrgV1ReplicaStatus, MAP),
    }


_REPLICAS = (KubeflowOrgV1ReplicaSpec, MAP)
_RUN_POLICY = (KubeflowOrgV1RunPolicy, ONE)


class KubeflowOrgV1PyTorchJobSpec(Model):
    _fields = names("elastic_policy nproc_per_node pytorch_replica_specs run_policy")
    _children = {
        "elastic_policy": (KubeflowOrgV1ElasticPolicy, ONE),
        "pytorch_replica_specs": _REPLICAS,
        "run_policy": _RUN_POLICY,
    }


class KubeflowOrgV1TFJobSpec(Model):
    _fields = names("enable_dynamic_worker run_policy success_policy tf_replica_specs")
    _children = {"run_policy": _RUN_POLICY, "tf_replica_specs": _REPLICAS}


class KubeflowOrgV1XGBoostJobSpec(Model):
    _fields = names("run_policy xgb_replica_specs")
    _children = {"run_policy": _RUN_POLICY, "xgb_replica_specs": _REPLICAS}


class KubeflowOrgV1MPIJobSpec(Model):
    _fields = names("clean_pod_policy main_container mpi_replica_specs run_policy slots_per_worker")
    _children = {"mpi_replica_specs": _REPLICAS, "run_policy": _RUN_POLICY}


class KubeflowOrgV1PaddleJobSpec(Model):
    _fields = names("elastic_policy paddle_replica_specs run_policy")
    _children = {
        "elastic_policy": (KubeflowOrgV1PaddleElasticPolicy, ONE),
        "paddle_replica_specs": _REPLICAS,
        "run_policy": _RUN_POLICY,
    }


class KubeflowOrgV1JAXJobSpec(Model):
    _fields = names("jax_replica_specs run_policy")
    _children = {"jax_replica_specs": _REPLICAS, "run_policy": _RUN_POLICY}


class _Job(Model):
    _fields = names("api_version kind metadata spec status")


def _job_children(spec: type[Model]) -> Mapping[str, tuple[type[Model], str]]:
    return {
        "metadata": (V1ObjectMeta, ONE),
        "spec": (spec, ONE),
        "status": (KubeflowOrgV1JobStatus, ONE),
    }


class KubeflowOrgV1PyTorchJob(_Job):
    _children = _job_children(KubeflowOrgV1PyTorchJobSpec)


class KubeflowOrgV1TFJob(_Job):
    _children = _job_children(KubeflowOrgV1TFJobSpec)


class KubeflowOrgV1XGBoostJob(_Job):
    _children = _job_children(KubeflowOrgV1XGBoostJobSpec)


class KubeflowOrgV1MPIJob(_Job):
    _children = _job_children(KubeflowOrgV1MPIJobSpec)


class KubeflowOrgV1PaddleJob(_Job):
    _children = _job_children(KubeflowOrgV1PaddleJobSpec)


class KubeflowOrgV1JAXJob(_Job):
    _children = _job_children(KubeflowOrgV1JAXJobSpec)


JOB_MODELS: dict[str, type[Model]] = {
    "TFJob": KubeflowOrgV1TFJob,
    "PyTorchJob": KubeflowOrgV1PyTorchJob,
    "XGBoostJob": KubeflowOrgV1XGBoostJob,
    "MPIJob": KubeflowOrgV1MPIJob,
    "PaddleJob": KubeflowOrgV1PaddleJob,
    "JAXJob": KubeflowOrgV1JAXJob,
}
"""Upstream's `JOB_PARAMETERS` kinds, each with its model."""
