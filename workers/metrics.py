"""A worker's Prometheus metrics (names under `trainhub_worker_`), labelled by cluster so
several workers can share one registry in the embedded runner."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

_BY_REGISTRY: dict[int, WorkerMetrics] = {}


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.jobs = Gauge(
            "trainhub_worker_jobs",
            "Jobs on this cluster by phase and framework",
            ["cluster", "phase", "framework"],
            registry=registry,
        )
        self.pods_created = Counter(
            "trainhub_worker_pods_created", "Pods created", ["cluster"], registry=registry
        )
        self.pod_restarts = Counter(
            "trainhub_worker_pod_restarts",
            "Pods recreated after a retryable failure",
            ["cluster"],
            registry=registry,
        )
        self.free = Gauge(
            "trainhub_worker_cluster_free",
            "Free capacity of the cluster per resource",
            ["cluster", "resource"],
            registry=registry,
        )
        self.heartbeats = Counter(
            "trainhub_worker_heartbeats", "Heartbeats published", ["cluster"], registry=registry
        )
        self.dead_letters = Counter(
            "trainhub_worker_dead_letters",
            "Assignment records sent to the dead-letter topic",
            ["cluster"],
            registry=registry,
        )


def worker_metrics(registry: CollectorRegistry) -> WorkerMetrics:
    """One set of collectors per registry: registering the same names twice is an error."""
    key = id(registry)
    if key not in _BY_REGISTRY:
        _BY_REGISTRY[key] = WorkerMetrics(registry)
    return _BY_REGISTRY[key]
