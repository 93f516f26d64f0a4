"""JAXJob: Worker replicas only; process 0 is the coordinator."""

from __future__ import annotations

from collections.abc import Mapping

from schemas.kubeflow import AnyJob
from workers.frameworks.base import FrameworkAdapter, ReplicaCounts, service_name
from workers.network import Network


class JAXAdapter(FrameworkAdapter):
    kind = "JAXJob"
    default_container = "jax"
    port_name = "jaxjob-port"
    default_port = 6666
    default_restart_policy = "Never"

    def is_master(self, job: AnyJob, rtype: str, index: int) -> bool:
        return rtype == "Worker" and index == 0

    def environment(self, job: AnyJob, rtype: str, index: int, net: Network) -> dict[str, str]:
        coordinator = service_name(job, "Worker", 0)
        return {
            "PYTHONUNBUFFERED": "1",
            "COORDINATOR_ADDRESS": net.host(coordinator, job.metadata.namespace),
            "COORDINATOR_PORT": str(net.port(coordinator, self.port_of(job, "Worker"))),
            "NUM_PROCESSES": str(job.total_replicas),
            "PROCESS_ID": str(index),
        }

    def succeeded(self, job: AnyJob, counts: Mapping[str, ReplicaCounts]) -> bool:
        workers = counts.get("Worker")
        return workers is not None and workers.succeeded == workers.expected
