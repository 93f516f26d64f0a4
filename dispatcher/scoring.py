"""Scoring policies: each rates a feasible cluster 0..100; the hub combines them with weights."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from schemas.cluster import ClusterSnapshot

_BASE_RESOURCES = ("cpu", "memory")


@dataclass(frozen=True)
class ScoreInput:
    cluster: ClusterSnapshot
    free: Mapping[str, Decimal]
    """Cluster-wide free amount per resource after running pods and reservations."""
    demand: Mapping[str, Decimal]
    """The whole job's requests per resource."""


class ScoringPolicy(Protocol):
    name: str

    def score(self, item: ScoreInput) -> float: ...


def _scored_resources(item: ScoreInput) -> list[str]:
    extra = [r for r in item.demand if r not in _BASE_RESOURCES and item.demand[r] > 0]
    return [*_BASE_RESOURCES, *sorted(extra)]


def _free_fraction_after(item: ScoreInput, resource: str) -> float | None:
    total = item.cluster.total(resource)
    if total <= 0:
        return None
    left = item.free.get(resource, Decimal(0)) - item.demand.get(resource, Decimal(0))
    return max(0.0, min(1.0, float(left / total)))


class LeastAllocated:
    """Spread: prefer the cluster that keeps the largest share of its capacity free."""

    name = "least-allocated"

    def score(self, item: ScoreInput) -> float:
        fractions = [
            f for r in _scored_resources(item) if (f := _free_fraction_after(item, r)) is not None
        ]
        return 100.0 * sum(fractions) / len(fractions) if fractions else 0.0


class MostAllocated:
    """Pack: prefer the fullest cluster that still fits, keeping others free for big gangs."""

    name = "most-allocated"

    def score(self, item: ScoreInput) -> float:
        return 100.0 - LeastAllocated().score(item)


POLICIES: dict[str, type[LeastAllocated] | type[MostAllocated]] = {
    LeastAllocated.name: LeastAllocated,
    MostAllocated.name: MostAllocated,
}


@dataclass(frozen=True)
class WeightedScorer:
    policies: tuple[tuple[ScoringPolicy, float], ...]

    @classmethod
    def from_weights(cls, weights: Mapping[str, float]) -> WeightedScorer:
        unknown = sorted(set(weights) - set(POLICIES))
        if unknown:
            raise ValueError(f"unknown scoring policies {unknown}; known: {sorted(POLICIES)}")
        return cls(tuple((POLICIES[name](), w) for name, w in weights.items() if w > 0))

    def score(self, item: ScoreInput) -> float:
        total_weight = sum(w for _, w in self.policies)
        if total_weight == 0:
            return 0.0
        return sum(p.score(item) * w for p, w in self.policies) / total_weight
