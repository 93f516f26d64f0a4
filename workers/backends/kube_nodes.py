"""The cluster's nodes as a watch keeps them, for capacity: listed once at start, then
followed, instead of listed again for every heartbeat.

A node object is large (its images, addresses, daemon endpoints, every condition) and a big
cluster has thousands, while what capacity needs of one changes seldom; so each node is kept
cut down to the fields `node_snapshots` reads."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from workers.backends.kube_client import KubeApi, KubeError
from workers.backends.kube_watch import PodWatch

log = logging.getLogger(__name__)


class NodeWatch(PodWatch):
    resource = "nodes"

    def _list_method(self) -> tuple[Any, tuple[Any, ...]]:
        return self.api.core.list_node, ()


def _kept(node: Mapping[str, Any]) -> dict[str, Any]:
    """What capacity reads of a node (kube_capacity.node_snapshots), nothing more."""
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {
        "metadata": {"name": metadata.get("name"), "labels": metadata.get("labels") or {}},
        "spec": {"unschedulable": spec.get("unschedulable", False), "taints": spec.get("taints")},
        "status": {
            "allocatable": status.get("allocatable") or {},
            "conditions": [c for c in status.get("conditions") or [] if c.get("type") == "Ready"],
        },
    }


class NodeCache:
    """Every node of the cluster by uid, kept current by a `NodeWatch`."""

    def __init__(self, api: KubeApi, *, timeout_seconds: int = 300) -> None:
        self._nodes: dict[str, dict[str, Any]] = {}
        self.watch = NodeWatch(
            api, None, "", self._on_node, self._on_resync, timeout_seconds=timeout_seconds
        )
        self._task: asyncio.Task[None] | None = None

    async def load(self) -> None:
        """The first list: a refusal (403) or an outage surfaces here, at the worker's start."""
        await self.watch.list()

    def follow(self, task: asyncio.Task[None]) -> None:
        """The task running `watch.run()`, so that `nodes()` can tell when it ended."""
        self._task = task

    def nodes(self) -> list[dict[str, Any]]:
        """The nodes as last seen; KubeError once the watch has stopped for good (a 403: the
        identity lost its permission), rather than a view that would never change again."""
        task = self._task
        if task is not None and task.done() and not task.cancelled():
            error = task.exception()
            if isinstance(error, KubeError):
                raise error
            raise KubeError(f"the node watch stopped: {error!r}")
        return list(self._nodes.values())

    async def _on_node(self, event: str, node: Mapping[str, Any]) -> None:
        uid = str((node.get("metadata") or {}).get("uid") or "")
        if not uid:
            return
        if event == "DELETED":
            self._nodes.pop(uid, None)
        else:
            self._nodes[uid] = _kept(node)

    def _on_resync(self, _namespace: str | None, uids: set[str]) -> None:
        for uid in [u for u in self._nodes if u not in uids]:
            del self._nodes[uid]
