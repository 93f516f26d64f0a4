"""PyTorchJob: an optional Master (rank 0) and Workers, torchrun's `PET_*` variables, elastic
rendezvous; Workers wait for the Master's name before starting."""

from __future__ import annotations

from collections.abc import Mapping

from schemas.kubeflow import AnyJob, ElasticPolicy, PyTorchJob
from schemas.pod import EnvVar
from workers.frameworks.base import (
    Endpoint,
    FrameworkAdapter,
    ReplicaCounts,
    all_succeeded,
    as_integer,
    plain_env,
    service_name,
)
from workers.network import Network

DEFAULT_RDZV_BACKEND = "c10d"


def _pytorch(job: AnyJob) -> PyTorchJob:
    if not isinstance(job, PyTorchJob):
        raise TypeError(f"the PyTorchJob adapter got a {job.kind}")
    return job


class PyTorchAdapter(FrameworkAdapter):
    schema = PyTorchJob
    default_restart_policy = "OnFailure"

    def is_master(self, job: AnyJob, rtype: str, index: int) -> bool:
        if "Master" in job.replica_specs:
            return rtype == "Master"
        return rtype == "Worker" and index == 0

    def master_endpoint(self, job: AnyJob) -> Endpoint | None:
        if "Master" not in job.replica_specs:
            return None
        return Endpoint(service_name(job, "Master", 0), self.port_of(job, "Master"))

    def environment(self, job: AnyJob, rtype: str, index: int, net: Network) -> list[EnvVar]:
        job = _pytorch(job)
        env = {"PYTHONUNBUFFERED": "1"}
        nproc = job.spec.nprocPerNode
        master = self.master_endpoint(job)
        if master is not None:
            port = str(net.port(master.service, master.port))
            host = net.host(master.service, job.metadata.namespace)
            rank = index + 1 if rtype == "Worker" else index
            env |= {
                "MASTER_PORT": port,
                "PET_MASTER_PORT": port,
                "MASTER_ADDR": host,
                "PET_MASTER_ADDR": host,
                # "auto", "cpu" and "gpu" are resolved by torchrun; upstream counts them as 1.
                "WORLD_SIZE": str(job.total_replicas * (as_integer(nproc) or 1)),
                "RANK": str(rank),
                "PET_NODE_RANK": str(rank),
            }
        if nproc is not None:
            env["PET_NPROC_PER_NODE"] = nproc
        elastic = job.spec.elasticPolicy
        if elastic is None:
            env["PET_NNODES"] = str(job.total_replicas)
        else:
            env |= self._elastic_environment(job, elastic, net)
        return plain_env(env)

    def _elastic_environment(
        self, job: PyTorchJob, elastic: ElasticPolicy, net: Network
    ) -> dict[str, str]:
        if elastic.rdzvHost is not None:
            port = elastic.rdzvPort or self.port_of(job, "Worker")
            endpoint = f"{elastic.rdzvHost}:{port}"
        else:
            worker0 = service_name(job, "Worker", 0)
            port = net.port(worker0, elastic.rdzvPort or self.port_of(job, "Worker"))
            endpoint = f"{net.host(worker0, job.metadata.namespace)}:{port}"
        workers = job.replicas_of("Worker")
        # Upstream's defaulting: a missing bound takes the other one, both missing the Workers.
        low = elastic.minReplicas if elastic.minReplicas is not None else elastic.maxReplicas
        high = elastic.maxReplicas if elastic.maxReplicas is not None else elastic.minReplicas
        env = {
            "PET_RDZV_ENDPOINT": endpoint,
            "PET_RDZV_BACKEND": elastic.rdzvBackend or DEFAULT_RDZV_BACKEND,
            "PET_NNODES": f"{workers if low is None else low}:{workers if high is None else high}",
        }
        if elastic.maxRestarts is not None:
            env["PET_MAX_RESTARTS"] = str(elastic.maxRestarts)
        if elastic.nProcPerNode is not None:
            env["PET_NPROC_PER_NODE"] = str(elastic.nProcPerNode)
        if elastic.rdzvId is not None:
            env["PET_RDZV_ID"] = elastic.rdzvId
        if elastic.rdzvConf:
            env["PET_RDZV_CONF"] = ",".join(f"{c.key}={c.value}" for c in elastic.rdzvConf)
        if elastic.standalone:
            env["PET_STANDALONE"] = ""
        return env

    def succeeded(self, job: AnyJob, counts: Mapping[str, ReplicaCounts]) -> bool:
        if "Master" in job.replica_specs:
            return all_succeeded(counts, "Master")
        workers = counts.get("Worker")
        if workers is None:
            return False
        elastic = _pytorch(job).spec.elasticPolicy is not None
        return workers.succeeded >= workers.expected or (elastic and workers.succeeded > 0)
