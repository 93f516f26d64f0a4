"""Best fit's candidate nodes for one kind of pod on one cluster, shared by every job shape.

A kind of pod is what decides where one such pod goes: the nodes that admit it and what it
takes of them, not how many of them a job has nor which job. Jobs from a few templates in
several sizes (2, 3 or 4 workers of one pod size) are as many shapes but one kind of pod, so
a cluster builds one packing heap per kind instead of one per shape: at 1,000 clusters, where
most clusters are packed only a few times, building heaps was a tenth of a decision.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from dispatcher.amounts import Amount
from dispatcher.demand import PodDemand
from dispatcher.gang_fit import PackingHeap
from dispatcher.reservation_versions import ChangeLog

PodKind = tuple[object, ...]
"""What makes two pods alike for packing: their admission and their positive needs."""


def pod_kind(demand: PodDemand) -> PodKind:
    return (demand.admission_key, demand.positive_needs)


class PodKindPacking:
    """One kind of pod's `PackingHeap` on one cluster, and how current it is."""

    __slots__ = ("heap", "log_end", "outdated")

    def __init__(self) -> None:
        self.heap: PackingHeap | None = None
        self.log_end = 0
        """Where in the cluster's node change log `heap` is up to date."""
        self.outdated: set[int] = set()
        """Nodes whose entries in `heap` predate the cluster's current snapshot."""

    def carried(self, outdated: Iterable[int]) -> PodKindPacking:
        """This packing for the next snapshot of the same nodes (the heap moves over, to be
        refreshed on the `outdated` nodes); this one is left empty."""
        moved = PodKindPacking()
        moved.heap, moved.log_end = self.heap, self.log_end
        moved.outdated = self.outdated.union(outdated)
        self.heap = None
        return moved

    def current(
        self,
        demand: PodDemand,
        candidates: Sequence[int],
        allowed: set[int],
        node_index: Mapping[str, int],
        log: ChangeLog | None,
        reserving: bool,
        free_of: Callable[[int], Mapping[str, Amount]],
        pod_slot: Sequence[bool],
    ) -> PackingHeap:
        """The heap on the free capacity now. `log`: the cluster's node change log, when the
        reservations keep one; `reserving`: whether there are reservations at all (without a
        log they may have moved anything, so the heap is built again)."""
        changed = log.since(self.log_end) if log is not None else None
        heap = self.heap
        if heap is None or (changed is None and reserving):
            heap = self.heap = PackingHeap.scan(free_of, pod_slot, demand, candidates)
            self.outdated = set()
        elif changed or self.outdated:
            moved = {i for node in changed or () if (i := node_index.get(node)) is not None}
            moved |= self.outdated
            self.outdated = set()
            heap.refresh(free_of, pod_slot, demand, moved & allowed)
        if log is not None:
            self.log_end = log.end
        return heap
