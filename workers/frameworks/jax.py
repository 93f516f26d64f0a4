"""JAXJob: Worker replicas only; process 0 is the coordinator."""

from __future__ import annotations

from collections.abc import Mapping

from schemas.kubeflow import AnyJob, JAXJob
from schemas.pod import EnvVar
from workers.frameworks.base import (
    FrameworkAdapter,
    ReplicaCounts,
    all_succeeded,
    plain_env,
    service_name,
)
from workers.network import Network


class JAXAdapter(FrameworkAdapter):
    schema = JAXJob
    default_restart_policy = "Never"

    def is_master(self, job: AnyJob, rtype: str, index: int) -> bool:
        return rtype == "Worker" and index == 0

    def environment(self, job: AnyJob, rtype: str, index: int, net: Network) -> list[EnvVar]:
        coordinator = service_name(job, "Worker", 0)
        return plain_env(
            {
                "PYTHONUNBUFFERED": "1",
                "COORDINATOR_PORT": str(net.port(coordinator, self.port_of(job, "Worker"))),
                "COORDINATOR_ADDRESS": net.host(coordinator, job.metadata.namespace),
                "NUM_PROCESSES": str(job.total_replicas),
                "PROCESS_ID": str(index),
            }
        )

    def succeeded(self, job: AnyJob, counts: Mapping[str, ReplicaCounts]) -> bool:
        return all_succeeded(counts, "Worker")
