"""XGBoostJob: one Master (the tracker, rank 0) and Workers ranked after it."""

from __future__ import annotations

from collections.abc import Mapping

from schemas.kubeflow import AnyJob, XGBoostJob
from schemas.pod import EnvVar
from workers.frameworks.base import (
    FrameworkAdapter,
    ReplicaCounts,
    all_succeeded,
    plain_env,
    service_name,
)
from workers.network import Network


class XGBoostAdapter(FrameworkAdapter):
    schema = XGBoostJob
    default_restart_policy = "Never"

    def is_master(self, job: AnyJob, rtype: str, index: int) -> bool:
        return rtype == "Master"

    def environment(self, job: AnyJob, rtype: str, index: int, net: Network) -> list[EnvVar]:
        namespace = job.metadata.namespace
        master = service_name(job, "Master", 0)
        total = job.total_replicas
        rank = index + job.replicas_of("Master") if rtype == "Worker" else index
        env = {
            "MASTER_PORT": str(net.port(master, self.port_of(job, "Master"))),
            "MASTER_ADDR": net.host(master, namespace),
            "WORLD_SIZE": str(total),
            "RANK": str(rank),
            "PYTHONUNBUFFERED": "1",
        }
        if total > 1:
            # One WORKER_PORT for all workers: on a remapping network it is worker 0's.
            worker0 = service_name(job, "Worker", 0)
            workers = [service_name(job, "Worker", i) for i in range(total - 1)]
            env["WORKER_PORT"] = str(net.port(worker0, self.port_of(job, "Worker")))
            env["WORKER_ADDRS"] = ",".join(net.host(w, namespace) for w in workers)
        return plain_env(env)

    def succeeded(self, job: AnyJob, counts: Mapping[str, ReplicaCounts]) -> bool:
        return all_succeeded(counts, "Master")
