"""What the hub's rooms share: the bus, the job ledger, the cluster registry, reservations,
the placer, the TrainJob runtimes, and the signal that wakes the scheduling pass. Built once
by `Hub`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from bus.base import Bus
from bus.topics import Topics
from dispatcher.expiry import Expiries
from dispatcher.fairness import QueueTurns
from dispatcher.hub_config import HubConfig
from dispatcher.ledger import Ledger
from dispatcher.metrics import HubMetrics
from dispatcher.placement import Placer, VersionedReservations
from dispatcher.registry import ClusterRegistry
from dispatcher.runtime_follower import RuntimeFollower
from dispatcher.state_store import HubStateStore
from schemas.status import JobPhase

PLACED = (
    JobPhase.ASSIGNED,
    JobPhase.CREATED,
    JobPhase.RUNNING,
    JobPhase.RESTARTING,
    JobPhase.SUSPENDED,
)
"""Phases in which a cluster is (or may soon be) running the job's pods."""


@dataclass
class HubContext:
    bus: Bus
    topics: Topics
    config: HubConfig
    metrics: HubMetrics
    ledger: Ledger
    clusters: ClusterRegistry
    reservations: VersionedReservations
    placer: Placer
    turns: QueueTurns
    state: HubStateStore
    runtimes: RuntimeFollower
    expiries: Expiries = field(default_factory=Expiries)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    """Set to run the next scheduling pass now rather than at its interval."""
    epoch: int | None = None
    """The leading hub's epoch (dispatcher/leadership.py), on everything it publishes; None
    for a hub that runs alone (the embedded runner)."""
    replaying: bool = False
    """True while a starting hub rebuilds its state from the topics: nothing is published
    and nothing counted twice."""

    @property
    def default_queue(self) -> str:
        """The queue of jobs without `schedulingPolicy.queue`, as fairness counts them."""
        return self.turns.config.default_queue
