"""Host ports as placement resources: each port a resource of which every node has one.

A pod holding host port TCP/23456 (schemas/host_ports.py) needs one `hostport:TCP/23456`;
a node has one of it, none left where a pod already holds the port. Packing, reservations
and shortage reasons then treat ports as they treat cpu, so a gang of such pods is spread
one to a node, as kube-scheduler will place it. Snapshots do not carry these resources
(the set of ports is open): placement adds them to its own copy of each snapshot, for the
ports the jobs it has seen hold (`PortRooms`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal

from schemas.cluster import ClusterSnapshot

PREFIX = "hostport:"
MAX_PORTS = 256
"""Ports given room at once; past it the set starts again from the current job's (a fleet's
jobs hold a handful of distinct ports: each framework's default, a few of their own)."""
_ONE = Decimal(1)


def port_resource(port: str) -> str:
    return PREFIX + port


def is_port_resource(resource: str) -> bool:
    return resource.startswith(PREFIX)


def port_of(resource: str) -> str:
    return resource[len(PREFIX) :]


def with_port_rooms(snapshot: ClusterSnapshot, resources: Iterable[str]) -> ClusterSnapshot:
    """The snapshot with one of each port resource on every node, held where its pods hold
    the port."""
    wanted = tuple(resources)
    if not wanted:
        return snapshot
    nodes = []
    for node in snapshot.nodes:
        held = set(node.hostPorts)
        nodes.append(
            node.model_copy(
                update={
                    "allocatable": {**node.allocatable, **dict.fromkeys(wanted, _ONE)},
                    "requested": {
                        **node.requested,
                        **{r: _ONE for r in wanted if port_of(r) in held},
                    },
                }
            )
        )
    return snapshot.model_copy(update={"nodes": nodes})


class PortRooms:
    """Placement's copies of the snapshots with room for the ports seen so far.

    A copy is kept per cluster while its snapshot is the same object, so the placement
    cache (which tells snapshots apart by identity) keeps working across decisions; a job
    holding a port not seen before makes new copies of all.
    """

    def __init__(self) -> None:
        self.resources: frozenset[str] = frozenset()
        self._copies: dict[str, tuple[ClusterSnapshot, ClusterSnapshot]] = {}

    def view(
        self, clusters: Sequence[ClusterSnapshot], wanted: frozenset[str]
    ) -> Sequence[ClusterSnapshot]:
        """`clusters` as placement must see them for a job needing the port resources
        `wanted` (the clusters themselves while no job has held a port)."""
        if not wanted <= self.resources:
            grown = self.resources | wanted
            self.resources = grown if len(grown) <= MAX_PORTS else wanted
            self._copies.clear()
        if not self.resources:
            return clusters
        copies = self._copies
        if len(copies) > 2 * len(clusters) + 16:  # forget clusters gone from the fleet
            names = {c.name for c in clusters}
            self._copies = copies = {n: c for n, c in copies.items() if n in names}
        seen = []
        for cluster in clusters:
            known = copies.get(cluster.name)
            if known is None or known[0] is not cluster:
                known = copies[cluster.name] = (
                    cluster,
                    with_port_rooms(cluster, sorted(self.resources)),
                )
            seen.append(known[1])
        return seen
