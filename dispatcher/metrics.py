"""The hub's Prometheus metrics (names under `trainhub_`, plus the Training Operator's job
counters under their own names so that dashboards built for it keep working).

Counters and histograms are updated by the hub as things happen. Everything that is a state
(jobs by phase, queue depth, cluster capacity, reservations, heartbeat age) is read from the
hub's ledger, cluster registry and reservations when Prometheus scrapes, by `HubCollector`:
it can never drift from the hub's own view, and no code path has to remember to update it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NamedTuple, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from bus.base import Subscription
from bus.metrics import LagSampler, bus_metrics
from dispatcher.amounts import Amount
from dispatcher.ledger import JobRecord, Ledger
from dispatcher.registry import ClusterRegistry
from dispatcher.reservations import Reservations
from schemas.status import JobPhase

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_T = TypeVar("_T")


class _HeartbeatLimits(Protocol):
    @property
    def max_heartbeat_age(self) -> float: ...


class HubState(Protocol):
    """What `HubCollector` reads of the hub (read at every scrape, never written)."""

    @property
    def ledger(self) -> Ledger: ...

    @property
    def clusters(self) -> ClusterRegistry: ...

    @property
    def reservations(self) -> Reservations: ...

    @property
    def config(self) -> _HeartbeatLimits: ...

    @property
    def lost_clusters(self) -> Collection[str]: ...

    @property
    def default_queue(self) -> str:
        """The queue of jobs without `schedulingPolicy.queue` (as fairness counts them)."""
        ...


class HubMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
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
        self.dead_letters = Counter(
            "trainhub_dead_letters",
            "Records sent to the dead-letter topic",
            ["component"],
            registry=registry,
        )
        self.redispatches = Counter(
            "trainhub_redispatches",
            "Jobs taken from a cluster and queued again",
            registry=registry,
        )
        self.clusters_lost = Counter(
            "trainhub_clusters_lost",
            "Clusters marked lost after their heartbeats stopped",
            registry=registry,
        )
        self.forged_reports = Counter(
            "trainhub_forged_reports",
            "Records on a cluster's reports topic that spoke for another cluster (set aside)",
            ["cluster"],
            registry=registry,
        )
        self.decisions = Counter(
            "trainhub_placements",
            "Placement decisions by outcome",
            ["outcome"],
            registry=registry,
        )
        # Series that exist from the start, so that increase() sees the first event too.
        self.dead_letters.labels(component="hub")
        for outcome in ("assigned", "rejected"):
            self.decisions.labels(outcome=outcome)
        self.training_operator = TrainingOperatorCounters(registry)
        self.consumer_lag = bus_metrics(registry).consumer_lag
        self.state = HubCollector()
        registry.register(self.state)

    def track(self, hub: HubState) -> None:
        """Export the state of this hub at every scrape (one hub per registry)."""
        self.state.hub = hub

    def lag_sampler(self, subscriptions: Mapping[str, Subscription]) -> LagSampler:
        """The task that samples the hub's consumers' lag; `subscriptions` by topic."""
        return LagSampler(self.consumer_lag, "hub", subscriptions)


class TrainingOperatorCounters:
    """`training_operator_jobs_{created,deleted,successful,failed,restarted}_total`, labelled
    `job_namespace` and `framework` as the Kubeflow Training Operator exports them. Counted
    for the jobs trainhub manages, from the moment this hub process started."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(what: str, help_text: str) -> Counter:
            return Counter(
                f"training_operator_jobs_{what}",
                help_text,
                ["job_namespace", "framework"],
                registry=registry,
            )

        self._created = counter("created", "Counts number of jobs created")
        self._deleted = counter("deleted", "Counts number of jobs deleted")
        self._successful = counter("successful", "Counts number of jobs successful")
        self._failed = counter("failed", "Counts number of jobs failed")
        self._restarted = counter("restarted", "Counts number of jobs restarted")
        self._outcomes = (self._deleted, self._successful, self._failed, self._restarted)
        self._series: dict[tuple[str, str], _JobSeries] = {}
        """Each label pair's children, looked up once: `labels()` takes a lock and builds
        the label tuple, five times for every job admitted."""

    def _of(self, record: JobRecord) -> _JobSeries:
        labels = record.namespace or "default", record.framework or "unknown"
        series = self._series.get(labels)
        if series is None:
            # Every series of the pair starts at 0 now: one born at 1 by its first event
            # shows no increase() to the alerts and the dashboard.
            series = self._series[labels] = _JobSeries(
                *(c.labels(*labels) for c in (self._created, *self._outcomes))
            )
        return series

    def created(self, record: JobRecord) -> None:
        """A managed job was admitted (queued or held suspended)."""
        self._of(record).created.inc()

    def known(self, record: JobRecord) -> None:
        """A job this hub rebuilt from the status topic: its labels' series start at 0."""
        self._of(record)

    def deleted(self, record: JobRecord) -> None:
        self._of(record).deleted.inc()

    def phase_changed(self, record: JobRecord, new: JobPhase) -> None:
        """Call before the record takes phase `new` from its cluster's status."""
        if new == record.phase:
            return
        if new == JobPhase.SUCCEEDED:
            self._of(record).successful.inc()
        elif new == JobPhase.FAILED:
            self._of(record).failed.inc()
        elif new == JobPhase.RESTARTING:
            self._of(record).restarted.inc()


class _JobSeries(NamedTuple):
    created: Counter
    deleted: Counter
    successful: Counter
    failed: Counter
    restarted: Counter


@dataclass
class _Figures:
    jobs: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    queued: dict[str, int] = field(default_factory=dict)
    clusters: list[_ClusterFigures] = field(default_factory=list)


@dataclass
class _ClusterFigures:
    name: str
    healthy: bool
    lost: bool
    heartbeat_age: float
    nodes: int
    reservations: int
    allocatable: dict[str, Decimal]
    free: dict[str, Decimal]
    reserved: dict[str, Amount]


class HubCollector:
    """The hub's state as gauges, computed at scrape time (see the module docstring)."""

    def __init__(self) -> None:
        self.hub: HubState | None = None

    def describe(self) -> Iterator[Metric]:
        yield from _families().values()

    def collect(self) -> Iterator[Metric]:
        families = _families()
        if self.hub is not None:
            _fill(families, _consistent(lambda: _figures(self.hub)))
        yield from families.values()


def _families() -> dict[str, GaugeMetricFamily]:
    def gauge(name: str, help_text: str, labels: Iterable[str]) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, help_text, labels=list(labels))

    by_resource = ("cluster", "resource")
    return {
        "jobs": gauge(
            "trainhub_hub_jobs",
            "Jobs known to the hub by phase, framework, queue and cluster ('' when unplaced)",
            ("phase", "framework", "queue", "cluster"),
        ),
        "queued": gauge("trainhub_queue_length", "Jobs waiting for capacity, per queue", ["queue"]),
        "healthy": gauge(
            "trainhub_cluster_healthy",
            "1 when the cluster reports healthy and its heartbeat is fresh, else 0",
            ["cluster"],
        ),
        "lost": gauge(
            "trainhub_cluster_lost",
            "1 while the hub holds the cluster lost (no heartbeat for lost_after, its jobs "
            "moved elsewhere), else 0",
            ["cluster"],
        ),
        "age": gauge(
            "trainhub_cluster_heartbeat_age_seconds",
            "Seconds since the cluster's newest heartbeat was observed",
            ["cluster"],
        ),
        "nodes": gauge("trainhub_cluster_nodes", "Nodes in the cluster's heartbeat", ["cluster"]),
        "reservations": gauge(
            "trainhub_reservations",
            "Placements on the cluster not yet visible in its heartbeats",
            ["cluster"],
        ),
        "allocatable": gauge(
            "trainhub_cluster_allocatable",
            "Allocatable capacity per cluster and resource (from heartbeats)",
            by_resource,
        ),
        "free": gauge(
            "trainhub_cluster_free",
            "Free capacity per cluster and resource: heartbeat free minus reservations, >= 0",
            by_resource,
        ),
        "reserved": gauge(
            "trainhub_cluster_reserved",
            "Capacity reserved for placements not yet visible in heartbeats",
            by_resource,
        ),
    }


def _consistent(read: Callable[[], _T]) -> _T:
    """Scrapes run on the HTTP server's thread while the event loop changes the hub's dicts;
    a read that met a dict changing size is simply done again."""
    for _ in range(4):
        try:
            return read()
        except RuntimeError as error:
            if "changed size during iteration" not in str(error):
                raise
    return read()


def _figures(hub: HubState | None) -> _Figures:
    figures = _Figures()
    if hub is None:
        return figures
    records = hub.ledger.all()
    default_queue = hub.default_queue
    figures.queued[default_queue] = 0
    for record in records:
        queue = record.queue or default_queue
        key = (record.phase.value, record.framework or "unknown", queue, record.cluster or "")
        figures.jobs[key] = figures.jobs.get(key, 0) + 1
        queued = figures.queued.get(queue, 0)
        figures.queued[queue] = queued + (record.phase == JobPhase.QUEUED)
    reservations = hub.reservations
    lost = hub.lost_clusters
    for snapshot in hub.clusters.all():
        age = snapshot.age_seconds()
        resources = sorted({r for n in snapshot.nodes for r in n.allocatable})
        reserved = {r: reservations.total(snapshot.name, r) for r in resources}
        figures.clusters.append(
            _ClusterFigures(
                name=snapshot.name,
                healthy=snapshot.healthy and age <= hub.config.max_heartbeat_age,
                lost=snapshot.name in lost,
                heartbeat_age=age,
                nodes=len(snapshot.nodes),
                reservations=reservations.count(snapshot.name),
                allocatable={r: snapshot.total(r) for r in resources},
                free={r: max(Decimal(0), snapshot.free(r) - reserved[r]) for r in resources},
                reserved=reserved,
            )
        )
    return figures


def _fill(families: dict[str, GaugeMetricFamily], figures: _Figures) -> None:
    for labels, count in sorted(figures.jobs.items()):
        families["jobs"].add_metric(list(labels), count)
    for queue, count in sorted(figures.queued.items()):
        families["queued"].add_metric([queue], count)
    for cluster in figures.clusters:
        name = [cluster.name]
        families["healthy"].add_metric(name, 1.0 if cluster.healthy else 0.0)
        families["lost"].add_metric(name, 1.0 if cluster.lost else 0.0)
        families["age"].add_metric(name, cluster.heartbeat_age)
        families["nodes"].add_metric(name, cluster.nodes)
        families["reservations"].add_metric(name, cluster.reservations)
        for key, amounts in (
            ("allocatable", cluster.allocatable),
            ("free", cluster.free),
            ("reserved", cluster.reserved),
        ):
            for resource, amount in amounts.items():
                families[key].add_metric([cluster.name, resource], float(amount))
