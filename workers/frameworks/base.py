"""The adapter interface: everything that differs between Kubeflow kinds lives behind it."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from schemas.kubeflow import AnyJob
from workers.network import Network


@dataclass(frozen=True)
class ReplicaCounts:
    expected: int
    active: int = 0
    succeeded: int = 0
    failed: int = 0


def service_name(job: AnyJob, rtype: str, index: int) -> str:
    return f"{job.metadata.name}-{rtype.lower()}-{index}"


class FrameworkAdapter(abc.ABC):
    kind: ClassVar[str]
    default_container: ClassVar[str]
    port_name: ClassVar[str]
    default_port: ClassVar[int]
    default_restart_policy: ClassVar[str]
    creates_services: ClassVar[bool] = True

    def port_of(self, job: AnyJob, rtype: str) -> int:
        """The replica's port: the default container's port of our name, else the default."""
        rspec = job.replica_specs.get(rtype)
        if rspec is not None:
            for container in rspec.template.spec.containers:
                if container.name != self.default_container:
                    continue
                for port in container.ports or []:
                    if port.name == self.port_name:
                        return port.containerPort
        return self.default_port

    def restart_policy(self, job: AnyJob, rtype: str) -> str:
        rspec = job.replica_specs[rtype]
        return rspec.restartPolicy or self.default_restart_policy

    @abc.abstractmethod
    def is_master(self, job: AnyJob, rtype: str, index: int) -> bool:
        """Whether this replica carries `training.kubeflow.org/job-role=master`."""

    @abc.abstractmethod
    def environment(self, job: AnyJob, rtype: str, index: int, net: Network) -> dict[str, str]:
        """Variables injected into every container of the replica."""

    @abc.abstractmethod
    def succeeded(self, job: AnyJob, counts: Mapping[str, ReplicaCounts]) -> bool:
        """The kind's success rule over per-replica-type pod counts."""
