"""What a job asks of a cluster: one entry per replica type, each pod's requests and constraints."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from schemas.kubeflow import AnyJob
from schemas.pod import Toleration


@dataclass(frozen=True)
class PodDemand:
    replica_type: str
    count: int
    requests: dict[str, Decimal]
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()


def job_demand(job: AnyJob) -> list[PodDemand]:
    demands = []
    for rtype, rspec in job.replica_specs.items():
        count = job.replicas_of(rtype)
        if count == 0:
            continue
        pod = rspec.template.spec
        demands.append(
            PodDemand(
                replica_type=rtype,
                count=count,
                requests=pod.total_requests(),
                node_selector=dict(pod.nodeSelector or {}),
                tolerations=tuple(pod.tolerations or ()),
            )
        )
    return demands


def total_demand(demands: list[PodDemand]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for demand in demands:
        for name, amount in demand.requests.items():
            total[name] = total.get(name, Decimal(0)) + amount * demand.count
    return total
