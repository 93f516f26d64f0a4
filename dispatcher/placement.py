"""Choose one cluster for a whole job: filter, gang-fit per node, score, explain.

Filters, in the order a rejected cluster's reason reports them: the job's own problems
(malformed nodeAffinity or cluster annotations), its `trainhub.io/cluster-selector`, the
cluster's namespace allow-list, its pod security policy, whether the gang could fit even on
the empty cluster; these are "never" reasons, and a job every cluster refuses for them is
rejected. Then the job's exclusion after it was handed back or lost there, health, heartbeat
freshness, and the per-node gang fit on the capacity free now (after reservations).
Feasible clusters are scored by the weighted policies of dispatcher/scoring.py; the best
wins, the earlier listed on equal scores. Job annotations are described in
dispatcher/demand.py.

With a `PlacementCache` (a `Placer` keeps one) and `VersionedReservations`, a decision only
redoes the clusters that changed since the last decision of the same job shape; results
are the same as without. The ClusterScores of a decision are shared with the cache: read
them, never modify them.

A decision lists the chosen cluster and the next best few, and counts the others by kind of
reason (schemas/events.py), so its cost does not grow with the fleet; `explain=True` keeps
every cluster's verdict for `Placement.full_decision` (`trainhub plan`), as does a decision
that chose nothing (its reasons are the news).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from dispatcher.demand import JobProfile, profile_job
from dispatcher.gang_fit import Usage
from dispatcher.placement_cache import (
    ClusterFacts,
    Context,
    PlacementCache,
    Verdict,
    rejected,
)
from dispatcher.placement_config import PlacementConfig
from dispatcher.reservation_versions import VersionedReservations
from dispatcher.reservations import Reservations
from dispatcher.scoring import LeastAllocated, WeightedScorer
from schemas.cluster import ClusterSnapshot
from schemas.events import PlacementDecision
from schemas.kubeflow import AnyJob

__all__ = [
    "DEFAULT_SCORER",
    "Placement",
    "PlacementCache",
    "Placer",
    "VersionedReservations",
    "describe",
    "plan_placement",
]

EXCLUDED = "excluded for this job for a while: it was handed back or lost here"
_EXCLUDED_KIND = "excluded for this job"
_KEPT_PROFILES = 16_384
_KEPT_SHAPES = 4096
_new_decision = PlacementDecision.__pydantic_validator__.validate_python
LISTED_FEASIBLE = 5
"""Feasible clusters a decision lists (the chosen one first, as a rule)."""
LISTED_REJECTED = 10
"""Rejected clusters, the first by name, a decision that chose nothing lists with their
reasons (the same few its status message names)."""


@dataclass
class Placement:
    decision: PlacementDecision
    usage: Usage = field(default_factory=dict)
    never_fits: bool = False
    """True when no registered cluster could ever hold the job (too big, refused by every
    cluster's policy, labels or namespaces), or the job itself is malformed (`problem`)."""
    problem: str | None = None
    """Why the job cannot be placed anywhere whatever the clusters (malformed constraints)."""
    verdicts: Sequence[Verdict] = field(default=(), repr=False)
    """Every cluster's verdict when `complete`, else those of the clusters the decision lists."""
    complete: bool = True

    @property
    def chosen(self) -> str | None:
        return self.decision.chosen

    @cached_property
    def parts(self) -> dict[str, tuple[tuple[str, float], ...]]:
        """Per feasible cluster held (`verdicts`), each scoring policy's own score 0..100
        before weighting."""
        return {v.name: v.parts for v in self.verdicts if v.feasible}

    def full_decision(self) -> PlacementDecision:
        """The decision listing every cluster: the feasible ones best first, then the
        rejected ones by name (needs `complete`: plan with `explain=True`)."""
        if not self.complete:
            raise ValueError("this placement kept only the clusters its decision lists")
        ordered = sorted(self.verdicts, key=_sort_key)
        return _decision(self.decision.chosen, ordered, len(ordered), ordered)


DEFAULT_SCORER = WeightedScorer(((LeastAllocated(), 1.0),))


def plan_placement(
    job: AnyJob,
    clusters: Sequence[ClusterSnapshot],
    *,
    reservations: Reservations | None = None,
    scorer: WeightedScorer = DEFAULT_SCORER,
    now: datetime | None = None,
    max_heartbeat_age: float = 30.0,
    excluded: frozenset[str] = frozenset(),
    cache: PlacementCache | None = None,
    profile: JobProfile | None = None,
    explain: bool = False,
) -> Placement:
    """`profile`: the job's `profile_job`, when the caller keeps it between decisions;
    `explain`: keep every cluster's verdict (`Placement.full_decision`)."""
    now = now or datetime.now(UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    if profile is None:
        profile = profile_job(job)
    if cache is None:
        cache = PlacementCache()
    cache.bind(scorer, reservations)
    clusters = cache.port_rooms.view(clusters, profile.ports)
    max_cost = 0.0
    if scorer.uses_cost:
        max_cost = max((c.cost for c in clusters if c.cost is not None), default=0.0)
    version_of = getattr(reservations, "cluster_version", None)
    context = Context(reservations, scorer, now, max_heartbeat_age, max_cost, version_of)
    shape_id = cache.shape_id(profile)
    board = None
    if not excluded or not any(c.name in excluded for c in clusters):
        board = cache.board(profile, shape_id, clusters, context)
    if board is not None:
        facts, verdicts = board.facts, board.verdicts
        ranked: Iterable[int] = board.best()
        possible = board.possible
        feasible = len(board.feasible_positions)
        top = board.top(LISTED_FEASIBLE)
        rejections = board.rejected
    else:
        facts = [cache.facts(c) for c in clusters]
        verdicts = [_judge(f, profile, shape_id, context, excluded) for f in facts]
        best = sorted((v for v in verdicts if v.feasible), key=_sort_key)
        ranked = sorted(
            (i for i, v in enumerate(verdicts) if v.feasible),
            key=lambda i: (verdicts[i].sort_key[1], i),
        )
        possible = sum(1 for v in verdicts if not v.never)
        feasible = len(best)
        top = best[:LISTED_FEASIBLE]
        rejections = _count_rejections(verdicts)
    chosen: Verdict | None = None
    usage: Usage = {}
    for index in ranked:
        packed = facts[index].pack(profile, shape_id, context, verdicts[index])
        if packed is not None:
            chosen, usage = verdicts[index], packed
            break
    listed = top if chosen is None or chosen in top else [*top, chosen]
    complete = explain or chosen is None
    if chosen is None:  # why it went nowhere: the first rejected clusters by name too
        listed = (
            listed
            + sorted((v for v in verdicts if not v.feasible), key=_sort_key)[:LISTED_REJECTED]
        )
    name = chosen.name if chosen is not None else None
    return Placement(
        decision=_decision(name, listed, len(verdicts), (), feasible, rejections),
        usage=usage,
        never_fits=profile.problem is not None or (bool(clusters) and possible == 0),
        problem=profile.problem,
        # A copy: a board's list changes with its next decision.
        verdicts=list(verdicts) if complete else listed,
        complete=complete,
    )


def _sort_key(verdict: Verdict) -> tuple[bool, float, str]:
    return verdict.sort_key


def _count_rejections(verdicts: Iterable[Verdict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for verdict in verdicts:
        if not verdict.feasible:
            counts[verdict.kind] = counts.get(verdict.kind, 0) + 1
    return counts


def _decision(
    chosen: str | None,
    listed: Sequence[Verdict],
    considered: int,
    every: Sequence[Verdict],
    feasible: int | None = None,
    rejections: dict[str, int] | None = None,
) -> PlacementDecision:
    """`every`: all the verdicts, to count from, when `feasible` and `rejections` are not
    given."""
    if feasible is None:
        feasible = sum(1 for v in every if v.feasible)
    if rejections is None:
        rejections = _count_rejections(every)
    # The model's validator without the Python around it: half the cost of model_construct;
    # it takes the ClusterScores as they are and copies the counts (the board's move on).
    decision: PlacementDecision = _new_decision(
        {
            "chosen": chosen,
            "clusters": [v.score for v in listed],
            "considered": considered,
            "feasible": feasible,
            "rejected": rejections,
        }
    )
    return decision


def _judge(
    facts: ClusterFacts,
    profile: JobProfile,
    shape_id: int,
    context: Context,
    excluded: frozenset[str],
) -> Verdict:
    verdict = facts.judge(profile, shape_id, context)
    if facts.name in excluded and not verdict.never:
        return rejected(facts.name, EXCLUDED, _EXCLUDED_KIND)
    return verdict


class Placer:
    """Placement as the hub runs it: one scorer and one cache, from a `PlacementConfig`.

    A job waiting for capacity is planned again on every scheduling pass: what placement
    reads from it is kept (by object identity) for the most recent jobs.
    """

    def __init__(self, config: PlacementConfig | None = None) -> None:
        self.config = config or PlacementConfig()
        self.scorer = self.config.scorer()
        self.cache = PlacementCache()
        self._profiles: OrderedDict[int, tuple[AnyJob, JobProfile]] = OrderedDict()
        self._shapes: dict[tuple[object, ...], JobProfile] = {}
        """The first profile read of each job shape (`JobProfile.key`), which later jobs of
        that shape share."""

    def _profile(self, job: AnyJob) -> JobProfile:
        known = self._profiles.get(id(job))
        if known is not None and known[0] is job:
            return known[1]
        profile = profile_job(job)
        # Jobs of one shape share its first profile: equal keys place identically (the
        # boards already share their verdicts), and a kept profile is some thirty objects
        # the collector would otherwise walk for every job waiting.
        shared = self._shapes.get(profile.key)
        if shared is None:
            if len(self._shapes) >= _KEPT_SHAPES:
                self._shapes.clear()
            self._shapes[profile.key] = profile
        else:
            profile = shared
        self._profiles[id(job)] = (job, profile)
        if len(self._profiles) > _KEPT_PROFILES:
            self._profiles.popitem(last=False)
        return profile

    def retain(self, jobs: Iterable[AnyJob]) -> None:
        """Keep what was read from these jobs only (the hub: those still waiting after a
        pass). A kept profile holds its parsed job, so without this a placed or finished
        job's document stayed in memory until 16,384 newer jobs had pushed it out."""
        kept: OrderedDict[int, tuple[AnyJob, JobProfile]] = OrderedDict()
        for job in jobs:
            known = self._profiles.get(id(job))
            if known is not None and known[0] is job:
                kept[id(job)] = known
        self._profiles = kept

    @property
    def held(self) -> int:
        """How many jobs' profiles are kept."""
        return len(self._profiles)

    def problem(self, job: AnyJob) -> str | None:
        """Why the job can be placed nowhere whatever the clusters (malformed constraints),
        if it cannot; read once and kept for its placement."""
        return self._profile(job).problem

    def shape_key(self, job: AnyJob) -> tuple[object, ...]:
        """Equal keys are placed identically on the same clusters and reservations."""
        return self._profile(job).key

    def plan(
        self,
        job: AnyJob,
        clusters: Sequence[ClusterSnapshot],
        *,
        reservations: Reservations | None = None,
        now: datetime | None = None,
        max_heartbeat_age: float = 30.0,
        excluded: frozenset[str] = frozenset(),
        explain: bool = False,
    ) -> Placement:
        return plan_placement(
            job,
            clusters,
            reservations=reservations,
            scorer=self.scorer,
            now=now,
            max_heartbeat_age=max_heartbeat_age,
            excluded=excluded,
            cache=self.cache,
            profile=self._profile(job),
            explain=explain,
        )


def describe(placement: Placement) -> dict[str, Any]:
    """The decision as `trainhub plan -o json` could print it, with each policy's score:
    every cluster when the placement is `complete`, else those its decision lists."""
    decision = placement.full_decision() if placement.complete else placement.decision
    return {
        "chosen": placement.chosen,
        "clusters": [
            {**c.model_dump(), "policies": dict(placement.parts.get(c.name, ()))}
            for c in decision.clusters
        ],
        "summary": decision.summary(),
    }
