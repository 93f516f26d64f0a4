"""A throwaway Kafka 4.x cluster of N KRaft nodes on this machine, for broker-loss tests and
demos: each node a combined broker+controller with its own ports and data, all N the voters of
one static controller quorum, internal topics replicated on three nodes with
`min.insync.replicas` 2 (kafka_broker.py starts and probes the nodes)."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from trainhub_sandbox.errors import SandboxError
from trainhub_sandbox.kafka_broker import KafkaBroker, relaunch_kafka, start_nodes, stop_kafka

_BECAME_LEADER = re.compile(
    r"\[RaftManager id=(\d+)\] Completed transition to Leader\(.*?, epoch=(\d+),"
)

CLUSTER_MAX_HEAP_MB = 320
"""Each node's heap ceiling in a cluster: three sandbox nodes use about what one lone broker
(512 MiB) and a test run's clients do, and a node of a test cluster never holds more than a
few MB of records."""


@dataclass(frozen=True)
class KafkaCluster:
    """The running nodes, node ids 1..N in order."""

    brokers: tuple[KafkaBroker, ...]

    @property
    def bootstrap(self) -> str:
        """Every node's PLAINTEXT address: clients find the cluster while any one is up."""
        return ",".join(broker.bootstrap for broker in self.brokers)

    @property
    def sasl_bootstrap(self) -> str | None:
        addresses = [broker.sasl_bootstrap for broker in self.brokers if broker.sasl_bootstrap]
        return ",".join(addresses) or None

    @property
    def cluster_id(self) -> str:
        return self.brokers[0].cluster_id

    def node(self, node_id: int) -> KafkaBroker:
        for broker in self.brokers:
            if broker.node_id == node_id:
                return broker
        raise KeyError(f"no node {node_id} in a cluster of {len(self.brokers)}")

    def with_node(self, broker: KafkaBroker) -> KafkaCluster:
        """The cluster with `broker` in place of its node of the same id (after a restart)."""
        return replace(
            self,
            brokers=tuple(broker if b.node_id == broker.node_id else b for b in self.brokers),
        )


def start_kafka_cluster(
    workdir: Path,
    brokers: int = 3,
    *,
    scram_users: dict[str, str] | None = None,
    authorizer: bool = False,
    timeout: float = 120,
    max_heap_mb: int = CLUSTER_MAX_HEAP_MB,
) -> KafkaCluster:
    """Format and start `brokers` nodes in `workdir/node-<id>` and wait until each lists all
    of them; the options are `start_kafka`'s, applied to every node."""
    if brokers < 1:
        raise ValueError(f"a Kafka cluster needs at least one broker; got {brokers}")
    started = start_nodes(
        [workdir / f"node-{node_id}" for node_id in range(1, brokers + 1)],
        scram_users=scram_users,
        authorizer=authorizer,
        timeout=timeout,
        max_heap_mb=max_heap_mb,
    )
    return KafkaCluster(tuple(started))


def active_controller(cluster: KafkaCluster) -> int | None:
    """The node leading the controller quorum now, as the nodes' logs tell it: the one that
    became leader in the highest epoch (None before any did). Clients cannot ask: a KRaft
    broker names a random live broker as the controller in its metadata."""
    newest: tuple[int, int] | None = None
    for broker in cluster.brokers:
        try:
            text = broker.log_path.read_text(errors="replace")
        except OSError:
            continue
        for match in _BECAME_LEADER.finditer(text):
            epoch, node_id = int(match.group(2)), int(match.group(1))
            if newest is None or epoch > newest[0]:
                newest = (epoch, node_id)
    return None if newest is None else newest[1]


def restart_node(cluster: KafkaCluster, node_id: int, *, timeout: float = 90) -> KafkaCluster:
    """Start a stopped (or killed) node again on its ports and data; returns the cluster with
    its new PID."""
    return cluster.with_node(relaunch_kafka(cluster.node(node_id), timeout=timeout))


def stop_kafka_cluster(cluster: KafkaCluster, *, timeout: float = 15.0) -> None:
    """Stop every node by its PID (those already gone are fine), all at the same time: one
    after another, the last ones would wait out their grace period for a controller quorum
    that had already lost its majority."""
    with ThreadPoolExecutor(max_workers=len(cluster.brokers)) as pool:
        stops = [pool.submit(stop_kafka, broker, timeout=timeout) for broker in cluster.brokers]
    failures = [str(stop.exception()) for stop in stops if stop.exception() is not None]
    if failures:
        raise SandboxError("; ".join(failures))
