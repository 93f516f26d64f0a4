"""Settings for every trainhub process: flags, `TRAINHUB_*` variables or a YAML file.

The same names everywhere: field `topic_prefix` is flag `--topic-prefix`, variable
`TRAINHUB_TOPIC_PREFIX` and YAML key `topic_prefix`. Flags win over variables, variables over
the file, the file over defaults.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from dispatcher.hub_config import HubConfig
from dispatcher.placement_config import PlacementConfig
from schemas.errors import describe_validation_error
from workers.worker_config import WorkerConfig

_SETTING_OF = {"lost_after": "max_heartbeat_age", "overdue_after": "heartbeat_overdue_after"}
"""The setting a config field takes its value from where their names differ; every other
field of HubConfig and WorkerConfig named as a setting takes that setting."""


class TrainhubSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRAINHUB_", extra="forbid")

    bootstrap: str | None = Field(default=None, description="Kafka bootstrap servers HOST:PORT.")
    topic_prefix: str = Field(default="trainhub", description="Prefix of every topic name.")
    partitions: int = Field(default=3, ge=1, description="Partitions of the jobs/status topics.")
    replication: int = Field(default=1, ge=1, description="Replication factor of new topics.")
    security_protocol: Literal["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL"] = Field(
        default="PLAINTEXT", description="Kafka security protocol."
    )
    sasl_mechanism: str = Field(default="SCRAM-SHA-512", description="SASL mechanism.")
    sasl_username: str | None = Field(default=None, description="SASL user.")
    sasl_password: str | None = Field(default=None, description="SASL password.")
    ssl_cafile: str | None = Field(default=None, description="CA bundle for SSL.")
    ssl_certfile: str | None = Field(default=None, description="Client certificate for SSL.")
    ssl_keyfile: str | None = Field(default=None, description="Client key for SSL.")
    metrics_port: int | None = Field(
        default=None, ge=0, le=65535, description="Serve /metrics on this port."
    )
    heartbeat_interval: float = Field(default=5.0, gt=0, description="Seconds between heartbeats.")
    unschedulable_timeout: float = Field(
        default=120.0, gt=0, description="Seconds before a worker hands back unschedulable pods."
    )
    max_heartbeat_age: float = Field(
        default=30.0, gt=0, description="Seconds after which a cluster's heartbeat is stale."
    )
    exclusion_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Hub: seconds a job avoids a cluster that lost it or handed it back "
        "(pods unschedulable there).",
    )
    unavailable_cluster_wait: float = Field(
        default=900.0,
        gt=0,
        description="Hub: seconds a job waits (Queued, WaitingForCluster) while every cluster "
        "that could hold it is unavailable (its worker stopped, restarts or is lost) before "
        "it is rejected.",
    )
    waiting_status_interval: float = Field(
        default=30.0,
        ge=0,
        description="Hub: seconds a waiting job's published WaitingForCapacity reason stands "
        "before a changed one is published (the first goes out at once).",
    )
    finished_retention: float = Field(
        default=86400.0,
        gt=0,
        description="Hub: seconds a finished job stays known to the hub after it ended (then "
        "it is forgotten, as Kubernetes garbage-collects a job: its name is free again).",
    )
    run_retention: float = Field(
        default=60.0,
        ge=0,
        description="Worker: seconds a finished job's run stays in the worker's hands after "
        "it ended (then only a pending ttlSecondsAfterFinished is kept; its pods are found "
        "by their labels).",
    )
    heartbeat_overdue_after: float | None = Field(
        default=None,
        gt=0,
        description="Worker: seconds since its last reported capacity read after which it "
        "deletes the jobs no longer assigned to it before reporting again (default: three "
        "heartbeat intervals; keep it below the hub's max_heartbeat_age).",
    )
    gang_scheduler: Literal["volcano", "scheduler-plugins"] | None = Field(
        default=None,
        description="Worker (kube backend): give each job a PodGroup of this gang scheduler "
        "(volcano or scheduler-plugins) before its pods, which ask for that scheduler, as the "
        "Training Operator's --gang-scheduler-name does.",
    )
    mode: Literal["direct", "delegate"] = Field(
        default="direct",
        description="Worker (kube backend): direct makes each job's pods and Services itself; "
        "delegate hands each job to the member cluster's Kubeflow Training Operator as its "
        "kubeflow.org/v1 object and reports the status that operator writes.",
    )
    delegate_managed_by: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        description="Worker in delegate mode: the runPolicy.managedBy of the objects it hands "
        "to the member's operator (default: unset, which the Training Operator takes as its "
        "own; kubeflow.org/training-operator says the same).",
    )
    gang_scheduler_name: str | None = Field(
        default=None,
        max_length=253,
        description="Worker: the schedulerName of the gang scheduler (default volcano, or "
        "scheduler-plugins-scheduler); a pod template's own schedulerName is kept.",
    )
    local_pvc_dir: str | None = Field(
        default=None,
        description="Worker (local backend): the directory standing for PersistentVolumeClaims: "
        "claim C is DIR/C, where a pod's mount of it and a TrainJob initializer's pvc://C/PATH "
        "are read (default: none, and such a mount stays unmapped).",
    )

    default_managed_by: bool = Field(
        default=True,
        description="submit and up: give a job without runPolicy.managedBy trainhub's "
        "(trainhub.io/dispatcher), as the SDK does; false: send it as written (the hub then "
        "leaves it alone, Skipped, and submit warns).",
    )

    placement: dict[str, Any] = Field(
        default_factory=dict,
        description="Placement settings: scoring weights, gpu_product_label, priority_classes, "
        "queue_limits, default_queue_limit (a YAML mapping; JSON in the variable).",
    )

    def kafka(self) -> KafkaSettings:
        if not self.bootstrap:
            raise ValueError(
                "no Kafka bootstrap servers: pass --bootstrap HOST:PORT (the SDK: "
                "bootstrap=...), set TRAINHUB_BOOTSTRAP, or put `bootstrap:` in the config "
                "file (--config, or TRAINHUB_CONFIG)"
            )
        return KafkaSettings(
            bootstrap=self.bootstrap,
            security_protocol=self.security_protocol,
            sasl_mechanism=self.sasl_mechanism,
            sasl_username=self.sasl_username,
            sasl_password=self.sasl_password,
            ssl_cafile=self.ssl_cafile,
            ssl_certfile=self.ssl_certfile,
            ssl_keyfile=self.ssl_keyfile,
        )

    def topics(self) -> Topics:
        return Topics(
            prefix=self.topic_prefix, partitions=self.partitions, replication=self.replication
        )

    def hub_config(self) -> HubConfig:
        """The hub's configuration (ValueError: invalid placement settings)."""
        values = self._values_of(HubConfig)
        values["placement"] = PlacementConfig.from_dict(self.placement)
        return HubConfig(**values)

    def worker_config(self, cluster: str, **per_cluster: Any) -> WorkerConfig:
        """A worker's configuration: the settings, and what `per_cluster` says of its cluster
        (labels, namespaces, weight, cost, policy)."""
        return WorkerConfig(cluster=cluster, **{**self._values_of(WorkerConfig), **per_cluster})

    def _values_of(self, config: type[Any]) -> dict[str, Any]:
        """The settings of the fields of dataclass `config` that settings give."""
        values: dict[str, Any] = {}
        for item in dataclasses.fields(config):
            setting = _SETTING_OF.get(item.name, item.name)
            if setting in type(self).model_fields:
                values[item.name] = getattr(self, setting)
        return values


def load_settings(config: Path | None = None, **flags: Any) -> TrainhubSettings:
    """Defaults < YAML file < environment < flags (a flag left at None is not given)."""
    file_values: dict[str, Any] = {}
    if config is not None:
        try:
            loaded = yaml.safe_load(config.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{config}: not valid YAML: {exc}") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"{config}: expected a mapping of settings")
        file_values = loaded
    try:
        env_values = TrainhubSettings().model_dump(exclude_unset=True)
    except ValidationError as exc:
        raise ValueError(f"TRAINHUB_* environment: {describe_validation_error(exc)}") from None
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        return TrainhubSettings(**{**file_values, **env_values, **given})
    except ValidationError as exc:
        raise ValueError(describe_validation_error(exc)) from None
