"""Job objects shaped as kubeflow-training 1.9's models, for `TrainingClient`: the same class
names, attribute names (snake_case), positional order, `to_dict()` (snake_case keys) and
equality, with the kubernetes models a training script builds jobs from. No kubeflow or
kubernetes package is needed; their own model objects are accepted wherever these are.

`from_document` reads a Kubeflow document (camelCase, as the status topic holds it) into these
objects, timestamps as datetimes; `to_document` writes one back, as upstream's
`ApiClient.sanitize_for_serialization` does (None left out, keys as the apiserver spells them).
Keys these classes do not declare are kept, so a document read and written again is the same.
"""

from __future__ import annotations

import pprint
import re
from collections.abc import Mapping
from datetime import datetime
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
    "V1PodTemplateSpec",
    "V1Preconditions",
    "V1ResourceRequirements",
]
"""Upstream's names (what `from trainhub.training_client import *` brings, as
`from kubeflow.training import *` does)."""


def _names(text: str) -> tuple[str, ...]:
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
_MAPS = frozenset(
    _names(
        "labels annotations node_selector limits requests min_resources match_labels data "
        "binary_data string_data volume_attributes capacity allocatable"
    )
)
"""Attributes whose values are plain mappings: their keys are data, never renamed."""
_TIMES = frozenset(
    _names(
        "creation_timestamp deletion_timestamp last_transition_time last_update_time "
        "last_reconcile_time start_time completion_time started_at finished_at"
    )
)
_ONE, _LIST, _MAP = "one", "list", "map"


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
    _fields = _names(
        "annotations creation_timestamp deletion_grace_period_seconds deletion_timestamp "
        "finalizers generate_name generation labels managed_fields name namespace "
        "owner_references resource_version self_link uid"
    )


class V1EnvVar(Model):
    _fields = _names("name value value_from")


class V1ResourceRequirements(Model):
    _fields = _names("claims limits requests")


class V1ContainerPort(Model):
    _fields = _names("container_port host_ip host_port name protocol")


class V1Container(Model):
    _fields = _names(
        "args command env env_from image image_pull_policy name ports resources volume_mounts "
        "working_dir"
    )
    _children = {
        "env": (V1EnvVar, _LIST),
        "ports": (V1ContainerPort, _LIST),
        "resources": (V1ResourceRequirements, _ONE),
    }
    _open = True


class V1PodSpec(Model):
    _fields = _names(
        "affinity containers host_network image_pull_secrets init_containers node_name "
        "node_selector priority_class_name restart_policy scheduler_name service_account_name "
        "tolerations volumes"
    )
    _children = {"containers": (V1Container, _LIST), "init_containers": (V1Container, _LIST)}
    _open = True


class V1PodTemplateSpec(Model):
    _fields = _names("metadata spec")
    _children = {"metadata": (V1ObjectMeta, _ONE), "spec": (V1PodSpec, _ONE)}


class V1Pod(Model):
    _fields = _names("api_version kind metadata spec status")
    _children = {"metadata": (V1ObjectMeta, _ONE), "spec": (V1PodSpec, _ONE)}


class V1Preconditions(Model):
    _fields = _names("resource_version uid")


class V1DeleteOptions(Model):
    _fields = _names(
        "api_version dry_run grace_period_seconds kind orphan_dependents preconditions "
        "propagation_policy"
    )
    _children = {"preconditions": (V1Preconditions, _ONE)}


# -- kubeflow.org/v1 --------------------------------------------------------------------------


class KubeflowOrgV1SchedulingPolicy(Model):
    _fields = _names("min_available min_resources priority_class queue schedule_timeout_seconds")


class KubeflowOrgV1RunPolicy(Model):
    _fields = _names(
        "active_deadline_seconds backoff_limit clean_pod_policy managed_by scheduling_policy "
        "suspend ttl_seconds_after_finished"
    )
    _children = {"scheduling_policy": (KubeflowOrgV1SchedulingPolicy, _ONE)}


class KubeflowOrgV1ReplicaSpec(Model):
    _fields = _names("replicas restart_policy template")
    _children = {"template": (V1PodTemplateSpec, _ONE)}


class KubeflowOrgV1RDZVConf(Model):
    _fields = _names("key value")


class KubeflowOrgV1ElasticPolicy(Model):
    _fields = _names(
        "max_replicas max_restarts metrics min_replicas n_proc_per_node rdzv_backend rdzv_conf "
        "rdzv_host rdzv_id rdzv_port standalone"
    )
    _children = {"rdzv_conf": (KubeflowOrgV1RDZVConf, _LIST)}


class KubeflowOrgV1PaddleElasticPolicy(Model):
    _fields = _names("max_replicas max_restarts metrics min_replicas")


class KubeflowOrgV1JobCondition(Model):
    _fields = _names("last_transition_time last_update_time message reason status type")


class KubeflowOrgV1ReplicaStatus(Model):
    _fields = _names("active failed label_selector selector succeeded")


class KubeflowOrgV1JobStatus(Model):
    _fields = _names("completion_time conditions last_reconcile_time replica_statuses start_time")
    _children = {
        "conditions": (KubeflowOrgV1JobCondition, _LIST),
        "replica_statuses": (KubeflowOrgV1ReplicaStatus, _MAP),
    }


_REPLICAS = (KubeflowOrgV1ReplicaSpec, _MAP)
_RUN_POLICY = (KubeflowOrgV1RunPolicy, _ONE)


class KubeflowOrgV1PyTorchJobSpec(Model):
    _fields = _names("elastic_policy nproc_per_node pytorch_replica_specs run_policy")
    _children = {
        "elastic_policy": (KubeflowOrgV1ElasticPolicy, _ONE),
        "pytorch_replica_specs": _REPLICAS,
        "run_policy": _RUN_POLICY,
    }


class KubeflowOrgV1TFJobSpec(Model):
    _fields = _names("enable_dynamic_worker run_policy success_policy tf_replica_specs")
    _children = {"run_policy": _RUN_POLICY, "tf_replica_specs": _REPLICAS}


class KubeflowOrgV1XGBoostJobSpec(Model):
    _fields = _names("run_policy xgb_replica_specs")
    _children = {"run_policy": _RUN_POLICY, "xgb_replica_specs": _REPLICAS}


class KubeflowOrgV1MPIJobSpec(Model):
    _fields = _names(
        "clean_pod_policy main_container mpi_replica_specs run_policy slots_per_worker"
    )
    _children = {"mpi_replica_specs": _REPLICAS, "run_policy": _RUN_POLICY}


class KubeflowOrgV1PaddleJobSpec(Model):
    _fields = _names("elastic_policy paddle_replica_specs run_policy")
    _children = {
        "elastic_policy": (KubeflowOrgV1PaddleElasticPolicy, _ONE),
        "paddle_replica_specs": _REPLICAS,
        "run_policy": _RUN_POLICY,
    }


class KubeflowOrgV1JAXJobSpec(Model):
    _fields = _names("jax_replica_specs run_policy")
    _children = {"jax_replica_specs": _REPLICAS, "run_policy": _RUN_POLICY}


class _Job(Model):
    _fields = _names("api_version kind metadata spec status")


def _job_children(spec: type[Model]) -> Mapping[str, tuple[type[Model], str]]:
    return {
        "metadata": (V1ObjectMeta, _ONE),
        "spec": (spec, _ONE),
        "status": (KubeflowOrgV1JobStatus, _ONE),
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


# -- documents --------------------------------------------------------------------------------


def from_document(document: Mapping[str, Any], cls: type[Model] | None = None) -> Any:
    """A Kubeflow document as its job model (`cls` None: the model of its `kind`)."""
    if cls is None:
        kind = document.get("kind")
        cls = JOB_MODELS.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise ValueError(f"kind: one of {', '.join(JOB_MODELS)} (got {kind!r})")
    return _read(cls, document)


def _read(cls: type[Model], document: Mapping[str, Any]) -> Model:
    model = cls.__new__(cls)
    object.__setattr__(model, "_keys", {})
    for field in cls._fields:
        setattr(model, field, None)
    for key, value in document.items():
        attribute = snake(str(key))
        if camel(attribute) != key:
            model._keys[attribute] = key
        setattr(model, attribute, _read_value(cls, attribute, value))
    return model


def _read_value(cls: type[Model], attribute: str, value: Any) -> Any:
    child = cls._children.get(attribute)
    if child is not None and value is not None:
        kind, shape = child
        if shape == _ONE and isinstance(value, Mapping):
            return _read(kind, value)
        if shape == _LIST and isinstance(value, list):
            return [_read(kind, v) if isinstance(v, Mapping) else v for v in value]
        if shape == _MAP and isinstance(value, Mapping):
            return {k: _read(kind, v) if isinstance(v, Mapping) else v for k, v in value.items()}
    if attribute in _MAPS and isinstance(value, Mapping):
        return dict(value)
    if attribute in _TIMES and isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, Mapping):
        return _read(Object, value)
    if isinstance(value, list):
        return [_read(Object, v) if isinstance(v, Mapping) else v for v in value]
    return value


def to_document(value: Any) -> Any:
    """A model (these, or kubernetes'/kubeflow's own) as the apiserver's JSON: camelCase keys,
    None attributes left out, datetimes as RFC 3339."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, list | tuple):
        return [to_document(v) for v in value]
    if isinstance(value, Mapping):
        return {k: to_document(v) for k, v in value.items()}
    if isinstance(value, Model):
        keys: dict[str, str] = value._keys
        return {
            keys.get(k) or camel(k): to_document(v)
            for k, v in value.attributes().items()
            if v is not None
        }
    names = getattr(value, "attribute_map", None)
    if isinstance(names, Mapping) and hasattr(value, "openapi_types"):  # their own models
        return {
            names[k]: to_document(getattr(value, k))
            for k in value.openapi_types
            if getattr(value, k, None) is not None
        }
    raise ValueError(f"{type(value).__name__} is not a model or a JSON value")
