"""The hub's Prometheus metrics (names under `trainhub_`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class HubMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.jobs = Gauge(
            "trainhub_hub_jobs",
            "Jobs known to the hub by phase and framework",
            ["phase", "framework"],
            registry=registry,
        )
        self.placement_latency = Histogram(
            "trainhub_placement_latency_seconds",
            "Time from a job being queued to its assignment to a cluster",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.placement_score = Histogram(
            "trainhub_placement_score",
            "Score of the chosen cluster",
            buckets=(10, 20, 30, 40, 50, 60, 70, 80, 90, 100),
            registry=registry,
        )
        self.queue_length = Gauge(
            "trainhub_queue_length", "Jobs waiting for capacity", registry=registry
        )
        self.cluster_free = Gauge(
            "trainhub_cluster_free",
            "Free capacity per cluster and resource (from heartbeats)",
            ["cluster", "resource"],
            registry=registry,
        )
        self.cluster_total = Gauge(
            "trainhub_cluster_allocatable",
            "Allocatable capacity per cluster and resource",
            ["cluster", "resource"],
            registry=registry,
        )
        self.reservations = Gauge(
            "trainhub_reservations",
            "Placements not yet visible in heartbeats",
            ["cluster"],
            registry=registry,
        )
        self.dead_letters = Counter(
            "trainhub_dead_letters",
            "Records sent to the dead-letter topic",
            ["component"],
            registry=registry,
        )
        self.redispatches = Counter(
            "trainhub_redispatches", "Jobs taken from a cluster and queued again",
            registry=registry,
        )
        self.clusters_lost = Counter(
            "trainhub_clusters_lost", "Clusters marked lost after their heartbeats stopped",
            registry=registry,
        )
        self.decisions = Counter(
            "trainhub_placements",
            "Placement decisions by outcome",
            ["outcome"],
            registry=registry,
        )
