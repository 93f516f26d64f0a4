"""TFJob: Chief (or legacy Master), PS, Worker and Evaluator replicas described to TensorFlow
through `TF_CONFIG` in the `tensorflow` container."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from schemas.kubeflow import AnyJob, TFJob
from schemas.pod import EnvVar
from workers.frameworks.base import (
    FrameworkAdapter,
    ReplicaCounts,
    all_succeeded,
    plain_env,
    service_name,
)
from workers.network import Network

CHIEF_TYPES = ("Chief", "Master")


def _tensorflow(job: AnyJob) -> TFJob:
    if not isinstance(job, TFJob):
        raise TypeError(f"the TFJob adapter got a {job.kind}")
    return job


def _chief_type(job: AnyJob) -> str | None:
    return next((t for t in CHIEF_TYPES if t in job.replica_specs), None)


class TFAdapter(FrameworkAdapter):
    schema = TFJob
    default_restart_policy = "Never"
    env_in_every_container = False

    def is_master(self, job: AnyJob, rtype: str, index: int) -> bool:
        if _chief_type(job) is not None:
            return rtype in CHIEF_TYPES
        return rtype == "Worker" and index == 0

    def cluster_spec(self, job: AnyJob, net: Network) -> dict[str, list[str]]:
        """Every replica type present, Evaluator included, as `<pod>.<ns>.svc:<port>`."""
        cluster: dict[str, list[str]] = {}
        for rtype in job.replica_specs:
            port = self.port_of(job, rtype)
            hosts = []
            for index in range(job.replicas_of(rtype)):
                name = service_name(job, rtype, index)
                host = net.host(name, job.metadata.namespace, qualified=True)
                hosts.append(f"{host}:{net.port(name, port)}")
            cluster[rtype.lower()] = hosts
        return cluster

    def environment(self, job: AnyJob, rtype: str, index: int, net: Network) -> list[EnvVar]:
        job = _tensorflow(job)
        if job.total_replicas == 1:
            return []
        cluster = self.cluster_spec(job, net)
        task = {"type": rtype.lower(), "index": index}
        config: dict[str, Any]
        if job.spec.enableDynamicWorker:
            # The sparse form lets workers join and leave: each task sees itself and the PS.
            sparse: dict[str, Any] = {"worker": {}, "ps": []}
            if rtype == "PS":
                sparse["ps"] = [cluster["ps"][index]]
            elif rtype == "Worker":
                sparse["ps"] = cluster.get("ps")
                sparse["worker"] = {str(index): cluster["worker"][index]}
            config = {"cluster": sparse, "task": task}
        else:
            ordered = {t: cluster[t] for t in sorted(cluster)}
            config = {"cluster": ordered, "task": task, "environment": "cloud"}
        return plain_env({"TF_CONFIG": json.dumps(config, separators=(",", ":"))})

    def tolerates_failure(self, job: AnyJob, rtype: str) -> bool:
        # Upstream's enableDynamicWorker: workers may come and go, the chief decides.
        return rtype == "Worker" and bool(_tensorflow(job).spec.enableDynamicWorker)

    def succeeded(self, job: AnyJob, counts: Mapping[str, ReplicaCounts]) -> bool:
        chief = _chief_type(job)
        if chief is not None:
            return all_succeeded(counts, chief)
        workers = counts.get("Worker")
        if workers is None:
            return False
        if all_succeeded(counts, "Worker"):
            return True
        return _tensorflow(job).spec.successPolicy != "AllWorkers" and (
            0 in workers.succeeded_indexes
        )
