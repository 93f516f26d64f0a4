"""A sweep reads the assignments topic on from where the previous pass stopped, not from its
start, and what adoption keeps of the topic stays bounded by the jobs in hand."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from bus.base import Subscription
from bus.epochs import EpochFence
from bus.events import publish_payload
from bus.memory import MemoryBus
from bus.topics import Topics
from schemas.events import EventType, HubLeader, JobAssigned, JobRevoked
from schemas.job_parsing import job_uid_of
from tests.workers.test_worker_runtime import CLUSTER, jax
from workers import adoption as adoption_module
from workers.adoption import Adoption, assigned_run
from workers.backends.sim import SimBackend
from workers.cluster_spec import parse_cluster_spec
from workers.job_run import JobRun


class CountingBus(MemoryBus):
    """Counts the records every subscription polls, per topic."""

    def __init__(self) -> None:
        super().__init__()
        self.read: Counter[str] = Counter()

    def subscribe(self, topics: Sequence[str], **options: Any) -> Subscription:  # type: ignore[override]
        subscription = super().subscribe(topics, **options)
        poll = subscription.poll

        async def counted(timeout: float = 1.0, max_records: int = 500) -> list[Any]:
            records = await poll(timeout, max_records)
            self.read.update(r.topic for r in records)
            return records

        subscription.poll = counted  # type: ignore[method-assign]
        return subscription


class Cluster(SimBackend):
    """A cluster whose objects the test sets: which jobs have some, and which were deleted."""

    keeps_pods = True

    def __init__(self) -> None:
        super().__init__(parse_cluster_spec(f"{CLUSTER}:cpu=8,memory=16Gi").pool())
        self.objects: set[str] = set()
        self.deleted: list[str] = []

    async def job_uids(self) -> set[str]:
        return set(self.objects)

    async def delete_job(self, job_uid: str, namespace: str | None = None) -> None:
        self.objects.discard(job_uid)
        self.deleted.append(job_uid)


class Setup:
    def __init__(self) -> None:
        self.bus = CountingBus()
        self.topics = Topics()
        self.topic = self.topics.assignments(CLUSTER)
        self.cluster = Cluster()
        self.runs: dict[str, JobRun] = {}
        self.documents: dict[str, JobAssigned] = {}
        self.adoption = Adoption(
            self.bus,
            self.topics,
            self.cluster,
            self.runs,
            cluster=CLUSTER,
            forget=self._forget,
            count_jobs=lambda: None,
            fence=EpochFence(),
        )

    def _forget(self, run: JobRun) -> None:
        del self.runs[run.job.uid]

    async def start(self) -> None:
        await self.bus.start()
        await self.bus.create_topics([self.topics.assignment_spec(CLUSTER)])

    async def assign(self, name: str, attempt: int = 1) -> str:
        document = jax(name, workers=1)
        uid = job_uid_of(document)
        assert uid is not None
        assigned = JobAssigned(uid=uid, cluster=CLUSTER, attempt=attempt, job=document)
        self.documents[uid] = assigned
        await self._publish(uid, EventType.JOB_ASSIGNED, assigned, epoch=None)
        return uid

    async def revoke(self, uid: str, attempt: int = 1, epoch: int | None = None) -> None:
        revoked = JobRevoked(uid=uid, cluster=CLUSTER, attempt=attempt, reason="moved")
        await self._publish(uid, EventType.JOB_REVOKED, revoked, epoch=epoch)

    async def lead(self, epoch: int) -> None:
        """What a new leading hub writes first on every partition it writes."""
        leader = HubLeader(epoch=epoch, instance=f"hub-{epoch}")
        await self._publish("leader", EventType.HUB_LEADER, leader, epoch=epoch)

    async def _publish(self, key: str, event_type: str, payload: Any, epoch: int | None) -> None:
        await publish_payload(
            self.bus, self.topic, key, event_type, "test/hub", payload, epoch=epoch
        )

    def carried_out(self, uid: str) -> None:
        """What the assignments consumer does: a run, and objects in the cluster."""
        self.runs[uid] = assigned_run(self.documents[uid], self.cluster, CLUSTER)
        self.cluster.objects.add(uid)

    def finished(self, uid: str) -> None:
        """The run retired and, as the sim's do, its ended pods went with it."""
        del self.runs[uid]
        self.cluster.objects.discard(uid)

    async def sweep(self) -> int:
        """Sweep; returns how many records of the assignments topic it read."""
        before = self.bus.read[self.topic]
        await self.adoption.sweep()
        return self.bus.read[self.topic] - before


@pytest.fixture
async def setup() -> Any:
    s = Setup()
    await s.start()
    yield s
    await s.bus.close()


async def test_a_sweep_reads_only_what_came_after_the_last_pass(setup: Setup) -> None:
    s = setup
    a, b, c = [await s.assign(name) for name in ("a", "b", "c")]
    s.cluster.objects |= {a, b, c}
    await s.adoption.adopt()
    assert set(s.runs) == {a, b, c}
    assert s.bus.read[s.topic] == 3

    # The hub moves b away and places d here while the worker cannot hear it.
    await s.revoke(b)
    d = await s.assign("d")
    s.carried_out(d)
    assert await s.sweep() == 2
    assert s.cluster.deleted == [b]
    assert set(s.runs) == {a, c, d} and s.cluster.objects == {a, c, d}

    assert await s.sweep() == 0  # nothing new: nothing read, nothing deleted
    assert s.cluster.deleted == [b]

    # A revocation of c arrives; a paused hub's older-epoch revocation of a is refused.
    await s.revoke(c)
    await s.lead(2)
    await s.revoke(a, epoch=1)
    assert await s.sweep() == 3
    assert s.cluster.deleted == [b, c]
    assert set(s.runs) == {a, d}

    # A job assigned again after its revocation is kept; a stale revocation of its older
    # attempt does not take it back.
    await s.revoke(d)
    await s.assign("d", attempt=2)
    s.carried_out(d)
    await s.revoke(d, attempt=1)
    assert await s.sweep() == 3
    assert s.cluster.deleted == [b, c]
    assert set(s.runs) == {a, d} and s.runs[d].attempt == 2


async def test_what_adoption_keeps_of_the_topic_follows_the_jobs_in_hand(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = setup
    monkeypatch.setattr(adoption_module, "_PENDING_S", -1.0)  # no news counts as pending
    await s.adoption.adopt()
    running: list[str] = []
    for batch in range(6):
        uids = [await s.assign(f"job-{batch}-{i}") for i in range(40)]
        for uid in uids:
            s.carried_out(uid)
        if batch % 2:
            await s.revoke(uids[0])
        # Each sweep reads the batch's records, however many came before them.
        assert await s.sweep() == 40 + batch % 2
        assert s.adoption.remembered == len(s.runs)  # a revoked job's news went with it
        for uid in running:
            s.finished(uid)
        running = [u for u in uids if u in s.runs]
    assert await s.sweep() == 0
    assert s.adoption.remembered == len(s.runs) == 40 - 1
    for uid in running:
        s.finished(uid)
    await s.sweep()
    assert s.adoption.remembered == 0
    assert s.adoption.outdated_below == {}


async def test_an_assignment_not_yet_carried_out_is_remembered(setup: Setup) -> None:
    """A sweep may read an assignment before the consumer carries it out: once its run has
    retired, the objects it left are still known as this cluster's, not deleted."""
    s = setup
    await s.adoption.adopt()
    e = await s.assign("e")
    assert await s.sweep() == 0  # nothing in hand or in the cluster: nothing read yet
    s.cluster.objects.add("stray")
    assert await s.sweep() == 1
    assert s.cluster.deleted == ["stray"]
    assert s.adoption.remembered == 1
    s.carried_out(e)
    del s.runs[e]  # retired; its objects stay, as a real cluster's do
    await s.sweep()
    assert s.cluster.objects == {e} and s.cluster.deleted == ["stray"]


async def test_adoption_remembers_only_the_attempts_it_refuses(setup: Setup) -> None:
    s = setup
    kept, moved, again = [await s.assign(name) for name in ("kept", "moved", "again")]
    await s.revoke(moved)
    await s.revoke(again)
    await s.assign("again", attempt=2)
    s.cluster.objects |= {kept, moved}
    await s.adoption.adopt()
    assert s.adoption.outdated_below == {moved: 2, again: 2}
    assert set(s.runs) == {kept}
    assert s.cluster.deleted == [moved]
