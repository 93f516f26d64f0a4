"""PaddleJob: collective mode (Workers only, worker 0 leads) or parameter-server mode
(a Master leads); `PADDLE_MASTER` tells every pod where the leader listens."""

from __future__ import annotations

from collections.abc import Mapping

from schemas.kubeflow import AnyJob, PaddleJob
from schemas.pod import EnvVar
from workers.frameworks.base import (
    FrameworkAdapter,
    ReplicaCounts,
    all_succeeded,
    service_name,
)
from workers.network import Network

POD_IP_VARIABLE = "POD_IP_DUMMY"
"""Upstream's name for the downward-API variable that carries the leader's own pod IP."""


class PaddleAdapter(FrameworkAdapter):
    schema = PaddleJob
    default_restart_policy = "OnFailure"

    def is_master(self, job: AnyJob, rtype: str, index: int) -> bool:
        return rtype == "Master"

    def environment(self, job: AnyJob, rtype: str, index: int, net: Network) -> list[EnvVar]:
        parameter_server = "Master" in job.replica_specs
        leader_type = "Master" if parameter_server else "Worker"
        leader = service_name(job, leader_type, 0)
        port = net.port(leader, self.port_of(job, leader_type))
        env = [
            EnvVar(name="PYTHONUNBUFFERED", value="1"),
            EnvVar(name="PADDLE_JOB_ID", value=job.metadata.name),
            EnvVar(name="PADDLE_NNODES", value=str(job.total_replicas)),
        ]
        if rtype == leader_type and index == 0:
            # The leader binds its own pod IP; Kubernetes expands $(POD_IP_DUMMY) in the value.
            env += [
                EnvVar(
                    name=POD_IP_VARIABLE,
                    valueFrom={"fieldRef": {"fieldPath": "status.podIP"}},
                ),
                EnvVar(name="PADDLE_MASTER", value=f"$({POD_IP_VARIABLE}):{port}"),
            ]
        else:
            host = net.host(leader, job.metadata.namespace)
            env.append(EnvVar(name="PADDLE_MASTER", value=f"{host}:{port}"))
        if parameter_server:
            counter = "PADDLE_SERVER_NUM" if rtype == "Master" else "PADDLE_TRAINER_NUM"
            env.append(EnvVar(name=counter, value="1"))
        return env

    def succeeded(self, job: AnyJob, counts: Mapping[str, ReplicaCounts]) -> bool:
        if "Master" in job.replica_specs:
            return all_succeeded(counts, "Master")
        return "Worker" in counts and all_succeeded(counts, "Worker")
