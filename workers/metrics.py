"""A worker's Prometheus metrics (names under `trainhub_worker_` and `trainhub_kube_api_`),
labelled by cluster so several workers can share one registry in the embedded runner."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from weakref import WeakKeyDictionary

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

from bus.base import Subscription
from bus.metrics import LagSampler, bus_metrics

_BY_REGISTRY: WeakKeyDictionary[CollectorRegistry, WorkerMetrics] = WeakKeyDictionary()
_KUBE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class KubeApiMetrics:
    """Requests to Kubernetes apiservers, process-wide and labelled by cluster.

    The kube backend builds its API client deep inside (`KubeBackend.start`), far from any
    registry, so the client records here, as prometheus_client's own default registry would
    let it; each registry that a worker registered its cluster with exports that cluster's
    series (see `WorkerMetrics.register_cluster`).
    """

    def __init__(self) -> None:
        self.duration = Histogram(
            "trainhub_kube_api_request_duration_seconds",
            "Time to the apiserver's answer (headers, for watches) by verb and resource",
            ["cluster", "verb", "resource"],
            buckets=_KUBE_BUCKETS,
            registry=None,
        )
        self.requests = Counter(
            "trainhub_kube_api_requests",
            "Apiserver requests by verb, resource and HTTP status code "
            "(code 'error' when no answer came: connection failure or timeout)",
            ["cluster", "verb", "resource", "code"],
            registry=None,
        )
        self.retries = Counter(
            "trainhub_kube_api_retries",
            "Requests sent again after throttling, an outage or a lost connection",
            ["cluster"],
            registry=None,
        )

    def observe(self, cluster: str, verb: str, resource: str, code: str, seconds: float) -> None:
        self.duration.labels(cluster, verb, resource).observe(seconds)
        self.requests.labels(cluster, verb, resource, code).inc()

    def collect_for(self, clusters: frozenset[str]) -> Iterator[Metric]:
        """Every family, with only the samples of `clusters`."""
        for collector in (self.duration, self.requests, self.retries):
            for family in collector.collect():
                only = Metric(family.name, family.documentation, family.type, family.unit)
                only.samples = [s for s in family.samples if s.labels.get("cluster") in clusters]
                yield only


KUBE_API = KubeApiMetrics()


class _KubeApiExport:
    """The `KUBE_API` series of the clusters registered with one registry."""

    def __init__(self) -> None:
        self.clusters: frozenset[str] = frozenset()

    def describe(self) -> Iterator[Metric]:
        return KUBE_API.collect_for(frozenset())

    def collect(self) -> Iterator[Metric]:
        return KUBE_API.collect_for(self.clusters)


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
            "Pods recreated after a retryable failure, and containers restarted in place",
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
        self.consumer_lag = bus_metrics(registry).consumer_lag
        self._kube_api = _KubeApiExport()
        registry.register(self._kube_api)

    def register_cluster(self, cluster: str) -> None:
        """Start the cluster's counters at zero (so increase() sees their first event) and
        export its Kubernetes API request metrics."""
        for counter in (self.pods_created, self.pod_restarts, self.heartbeats, self.dead_letters):
            counter.labels(cluster)
        self._kube_api.clusters |= {cluster}

    def lag_sampler(self, subscriptions: Mapping[str, Subscription]) -> LagSampler:
        """The task that samples a worker's consumer lag; `subscriptions` by topic."""
        return LagSampler(self.consumer_lag, "worker", subscriptions)


def worker_metrics(registry: CollectorRegistry) -> WorkerMetrics:
    """One set of collectors per registry: registering the same names twice is an error."""
    metrics = _BY_REGISTRY.get(registry)
    if metrics is None:
        metrics = _BY_REGISTRY[registry] = WorkerMetrics(registry)
    return metrics
