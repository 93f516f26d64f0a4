"""Choose one cluster for a whole job: filter, gang-fit per node, score, explain."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from dispatcher.demand import PodDemand, job_demand, total_demand
from dispatcher.gang_fit import NodeRoom, Usage, gang_fit
from dispatcher.reservations import Reservations
from dispatcher.scoring import LeastAllocated, ScoreInput, WeightedScorer
from schemas.cluster import ClusterSnapshot
from schemas.events import ClusterScore, PlacementDecision
from schemas.kubeflow import AnyJob


@dataclass
class Placement:
    decision: PlacementDecision
    usage: Usage = field(default_factory=dict)
    never_fits: bool = False
    """True when no registered cluster could hold the job even empty."""

    @property
    def chosen(self) -> str | None:
        return self.decision.chosen


DEFAULT_SCORER = WeightedScorer(((LeastAllocated(), 1.0),))


def _cluster_problem(
    cluster: ClusterSnapshot, namespace: str, now: datetime, max_age: float
) -> str | None:
    if not cluster.healthy:
        return "cluster reports unhealthy"
    age = cluster.age_seconds(now)
    if age > max_age:
        return f"heartbeat is stale ({age:.0f}s old, limit {max_age:.0f}s)"
    if cluster.namespaces is not None and namespace not in cluster.namespaces:
        return f"namespace {namespace!r} is not allowed on this cluster"
    return None


def plan_placement(
    job: AnyJob,
    clusters: list[ClusterSnapshot],
    *,
    reservations: Reservations | None = None,
    scorer: WeightedScorer = DEFAULT_SCORER,
    now: datetime | None = None,
    max_heartbeat_age: float = 30.0,
    excluded: frozenset[str] = frozenset(),
) -> Placement:
    now = now or datetime.now(UTC)
    demands = job_demand(job)
    demand_total = total_demand(demands)
    scores: list[ClusterScore] = []
    best: tuple[float, str, Usage] | None = None
    ever_fits = False
    for cluster in clusters:
        verdict = _judge(cluster, job, demands, reservations, now, max_heartbeat_age, excluded)
        ever_fits = ever_fits or verdict.could_ever_fit
        if verdict.usage is None:
            scores.append(ClusterScore(name=cluster.name, feasible=False, reason=verdict.reason))
            continue
        free = _cluster_free(cluster, reservations)
        score = round(scorer.score(ScoreInput(cluster, free, demand_total)), 3)
        scores.append(ClusterScore(name=cluster.name, feasible=True, score=score))
        if best is None or score > best[0]:
            best = (score, cluster.name, verdict.usage)
    scores.sort(key=lambda s: (not s.feasible, -(s.score or 0.0), s.name))
    decision = PlacementDecision(chosen=best[1] if best else None, clusters=scores)
    return Placement(
        decision=decision,
        usage=best[2] if best else {},
        never_fits=bool(clusters) and not ever_fits,
    )


@dataclass
class _Verdict:
    usage: Usage | None
    reason: str | None
    could_ever_fit: bool


def _judge(
    cluster: ClusterSnapshot,
    job: AnyJob,
    demands: list[PodDemand],
    reservations: Reservations | None,
    now: datetime,
    max_age: float,
    excluded: frozenset[str],
) -> _Verdict:
    empty_fit = gang_fit([NodeRoom.of(n, empty=True) for n in cluster.nodes], demands)
    if not empty_fit.fits:
        return _Verdict(None, f"can never fit: {empty_fit.reason}", False)
    if cluster.name in excluded:
        return _Verdict(None, "excluded for this job after an earlier failure here", True)
    problem = _cluster_problem(cluster, job.metadata.namespace, now, max_age)
    if problem:
        return _Verdict(None, problem, True)
    reserved = reservations.on_node(cluster.name) if reservations else {}
    rooms = [NodeRoom.of(n, reserved=reserved.get(n.name)) for n in cluster.nodes]
    fit = gang_fit(rooms, demands)
    if not fit.fits:
        return _Verdict(None, f"not enough free capacity now: {fit.reason}", True)
    return _Verdict(fit.usage, None, True)


def _cluster_free(
    cluster: ClusterSnapshot, reservations: Reservations | None
) -> dict[str, Decimal]:
    resources = {r for n in cluster.nodes for r in n.allocatable}
    return {
        r: cluster.free(r) - (reservations.total(cluster.name, r) if reservations else Decimal(0))
        for r in resources
    }
