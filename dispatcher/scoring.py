"""Scoring policies: each rates a feasible cluster 0..100; the hub combines them with weights.

| name              | prefers                                                              |
|-------------------|----------------------------------------------------------------------|
| least-allocated   | the cluster left with the largest free share after the job (spread)   |
| most-allocated    | the fullest cluster that still fits (pack)                           |
| gpu-model         | the share of the cluster's GPUs (or nodes) of the product the job    |
|                   | names on the GPU product label (nodeSelector, required or preferred  |
|                   | nodeAffinity; preferred terms count by their weight)                 |
| cluster-affinity  | the share of the job's `trainhub.io/preferred-cluster-labels`         |
|                   | requirements the cluster's labels satisfy                            |
| cluster-weight    | the cluster's static `weight` (0..100) from its worker's config      |
| cost              | cheaper clusters: 100 x (1 - cost / the highest cost in the fleet)   |

A policy that has nothing to judge (a job naming no GPU product, a cluster without a weight)
gives every cluster the neutral 50, so it never changes the order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final, Protocol

from dispatcher.amounts import Amount
from dispatcher.demand import LabelRequirement, PodDemand, scored_resources
from schemas.cluster import ClusterSnapshot

NEUTRAL = 50.0
DEFAULT_GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(slots=True)
class ScoreInput:
    cluster: ClusterSnapshot
    free: Mapping[str, Amount]
    """Cluster-wide free amount per resource after running pods and reservations."""
    demand: Mapping[str, Amount]
    """The whole job's requests per resource."""
    pods: tuple[PodDemand, ...] = ()
    """The job's pods per replica type, with their node constraints."""
    preferred_clusters: tuple[LabelRequirement, ...] = ()
    """The job's soft wishes on cluster labels."""
    max_cost: float = 0.0
    """The highest `cost` among the clusters considered for this decision."""
    capacity: Mapping[str, Amount] | None = None
    """Cluster-wide allocatable per resource, when the caller has it at hand."""
    free_float: Mapping[str, float] | None = None
    """`free` in floats, when the caller keeps it (placement does, per cluster)."""
    capacity_float: Mapping[str, float] | None = None
    """Allocatable per resource in floats, with `free_float`."""
    scored: tuple[tuple[str, float], ...] | None = None
    """The resources allocation scores look at (`scored_resources`), each with the job's
    demand as a float, when the caller keeps them (placement does, per job)."""

    def total(self, resource: str) -> Amount:
        if self.capacity is not None:
            return self.capacity.get(resource, 0)
        return self.cluster.total(resource)


class ScoringPolicy(Protocol):
    # Read-only members, so that policies may declare them `Final` class constants (which
    # the compiled build reads from the class, for the registry below).
    @property
    def name(self) -> str: ...

    @property
    def static(self) -> bool:
        """Whether the score reads only the cluster's snapshot and the job (not the free
        capacity after reservations, nor the fleet): placement keeps such scores per
        snapshot and job shape instead of working them out on every reservation change."""
        ...

    def score(self, item: ScoreInput) -> float: ...


@dataclass(frozen=True)
class ScoringOptions:
    gpu_product_label: str = DEFAULT_GPU_PRODUCT_LABEL
    gpu_resource: str = DEFAULT_GPU_RESOURCE


def _free_share_after(item: ScoreInput) -> float:
    """The mean over cpu, memory and the job's other resources of the share of capacity
    left free after the job (each clamped to 0..1), times 100."""
    # In floats: a score is a ranking aid rounded to 3 decimals, and Decimal arithmetic was
    # most of a cluster's scoring time.
    free, capacity, scored = item.free_float, item.capacity_float, item.scored
    if free is None or capacity is None or scored is None:
        demand = item.demand
        resources = scored_resources(demand)
        scored = tuple((r, float(demand.get(r, 0))) for r in resources)
        free = {r: float(item.free.get(r, 0)) for r in resources}
        capacity = {r: float(item.total(r)) for r in resources}
    total = 0.0
    count = 0
    for resource, wanted in scored:
        size = capacity.get(resource, 0.0)
        if size <= 0.0:
            continue
        share = (free.get(resource, 0.0) - wanted) / size
        if share > 1.0:
            share = 1.0
        elif not share > 0.0:
            share = 0.0
        total += share
        count += 1
    return 100.0 * total / count if count else 0.0


class LeastAllocated:
    """Spread: prefer the cluster that keeps the largest share of its capacity free."""

    name: Final = "least-allocated"
    static: Final = False

    def score(self, item: ScoreInput) -> float:
        return _free_share_after(item)


class MostAllocated:
    """Pack: prefer the fullest cluster that still fits, keeping others free for big gangs."""

    name: Final = "most-allocated"
    static: Final = False

    def score(self, item: ScoreInput) -> float:
        return 100.0 - _free_share_after(item)


def wanted_products(pods: tuple[PodDemand, ...], label: str) -> dict[str, float]:
    """GPU products the job names on `label`, each with how much it wants it (0..1].

    nodeSelector and required nodeAffinity `In` values count fully; preferred nodeAffinity
    `In` values count by their term's weight / 100.
    """
    wanted: dict[str, float] = {}

    def want(product: str, strength: float) -> None:
        wanted[product] = max(wanted.get(product, 0.0), strength)

    for pod in pods:
        if label in pod.node_selector:
            want(pod.node_selector[label], 1.0)
        for term in pod.required_terms:
            for expr in term.expressions:
                if expr.key == label and expr.operator == "In":
                    for product in expr.values:
                        want(product, 1.0)
        for preferred in pod.preferred_terms:
            for expr in preferred.term.expressions:
                if expr.key == label and expr.operator == "In":
                    for product in expr.values:
                        want(product, preferred.weight / 100.0)
    return wanted


class GpuModelMatch:
    """Prefer the cluster where most of the GPU capacity is the product the job asks for."""

    name: Final = "gpu-model"
    static: Final = True

    def __init__(self, options: ScoringOptions | None = None) -> None:
        options = options or ScoringOptions()
        self.label = options.gpu_product_label
        self.resource = options.gpu_resource

    def score(self, item: ScoreInput) -> float:
        wanted = wanted_products(item.pods, self.label)
        if not wanted:
            return NEUTRAL
        top = max(wanted.values())
        matched = Decimal(0)
        total = Decimal(0)
        nodes = item.cluster.nodes
        by_gpus = any(n.allocatable.get(self.resource, 0) > 0 for n in nodes)
        for node in nodes:
            size = node.allocatable.get(self.resource, Decimal(0)) if by_gpus else Decimal(1)
            total += size
            product = node.labels.get(self.label)
            if product is not None and product in wanted:
                matched += size * Decimal(wanted[product] / top)
        return 100.0 * float(matched / total) if total > 0 else 0.0


class ClusterAffinity:
    """Prefer clusters whose labels satisfy more of the job's preferred cluster labels."""

    name: Final = "cluster-affinity"
    static: Final = True

    def score(self, item: ScoreInput) -> float:
        wishes = item.preferred_clusters
        if not wishes:
            return NEUTRAL
        labels = item.cluster.labels
        return 100.0 * sum(1 for w in wishes if w.matches(labels)) / len(wishes)


class ClusterWeight:
    """The operator's static preference for a cluster (`weight` in its heartbeat)."""

    name: Final = "cluster-weight"
    static: Final = True

    def score(self, item: ScoreInput) -> float:
        weight = item.cluster.weight
        return NEUTRAL if weight is None else max(0.0, min(100.0, weight))


class Cost:
    """Cheaper clusters first, relative to the most expensive cluster in the fleet."""

    name: Final = "cost"
    static: Final = False

    def score(self, item: ScoreInput) -> float:
        cost = item.cluster.cost
        if cost is None or item.max_cost <= 0:
            return NEUTRAL
        return max(0.0, min(100.0, 100.0 * (1.0 - cost / item.max_cost)))


PolicyFactory = Callable[[ScoringOptions], ScoringPolicy]

POLICIES: dict[str, PolicyFactory] = {
    LeastAllocated.name: lambda _: LeastAllocated(),
    MostAllocated.name: lambda _: MostAllocated(),
    GpuModelMatch.name: GpuModelMatch,
    ClusterAffinity.name: lambda _: ClusterAffinity(),
    ClusterWeight.name: lambda _: ClusterWeight(),
    Cost.name: lambda _: Cost(),
}


@dataclass(frozen=True)
class WeightedScorer:
    policies: tuple[tuple[ScoringPolicy, float], ...]
    total_weight: float = field(init=False, repr=False, compare=False)
    uses_cost: bool = field(init=False, repr=False, compare=False)
    """Whether the `cost` policy is in: only then does a decision look up the fleet's
    highest cost."""
    any_static: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_weight", sum(w for _, w in self.policies))
        object.__setattr__(self, "uses_cost", any(p.name == Cost.name for p, _ in self.policies))
        object.__setattr__(self, "any_static", any(p.static for p, _ in self.policies))

    @classmethod
    def from_weights(
        cls, weights: Mapping[str, float], options: ScoringOptions | None = None
    ) -> WeightedScorer:
        unknown = sorted(set(weights) - set(POLICIES))
        if unknown:
            raise ValueError(f"unknown scoring policies {unknown}; known: {sorted(POLICIES)}")
        negative = sorted(name for name, w in weights.items() if not w >= 0)
        if negative:
            raise ValueError(f"scoring weights must be >= 0 (got {negative})")
        options = options or ScoringOptions()
        return cls(tuple((POLICIES[name](options), w) for name, w in weights.items() if w > 0))

    def parts(
        self, item: ScoreInput, known: tuple[float | None, ...] = ()
    ) -> tuple[tuple[str, float], ...]:
        """Each policy's own score 0..100, before weighting; `known`: this scorer's
        `static_scores` for the same snapshot and job, when the caller kept them."""
        if not known:
            return tuple([(p.name, p.score(item)) for p, _ in self.policies])
        return tuple(
            [
                (p.name, p.score(item) if score is None else score)
                for (p, _), score in zip(self.policies, known, strict=True)
            ]
        )

    def static_scores(self, item: ScoreInput) -> tuple[float | None, ...]:
        """The scores of the `static` policies, None in the places of the others; empty
        when no policy is static."""
        if not self.any_static:
            return ()
        return tuple([p.score(item) if p.static else None for p, _ in self.policies])

    def combine(self, parts: tuple[tuple[str, float], ...]) -> float:
        """The weighted mean of `parts` (as returned by `parts` for this scorer)."""
        if self.total_weight == 0:
            return 0.0
        if len(parts) == 1:
            return parts[0][1]
        weighted = 0.0
        for (_, score), (_, weight) in zip(parts, self.policies, strict=True):
            weighted += score * weight
        return weighted / self.total_weight

    def score(self, item: ScoreInput) -> float:
        return self.combine(self.parts(item))
