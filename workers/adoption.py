"""Making a cluster agree with its assignments topic: at start, taking back the jobs whose pods
are still there after a restart; after an outage, deleting the objects of jobs the hub took
away meanwhile (a sweep). Neither leaves the pods of a revoked job behind."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from bus.base import Bus
from bus.epochs import EpochFence
from bus.events import events_to_end
from bus.retry import retry_transient
from bus.topics import Topics
from schemas.events import EventType, JobAssigned, JobRevoked
from schemas.job_parsing import parse_job
from workers.backends.base import BACKEND_RETRY, Backend, BackendError, is_transient
from workers.job_run import JobRun
from workers.rendering import render_job

log = logging.getLogger(__name__)

ADOPTION_RETRY = replace(BACKEND_RETRY, attempts=5)
"""The adoption pass gives up starting after these tries (its Deployment restarts the
worker): running without that pass could leak the pods of jobs revoked while it was away."""


def assigned_run(assigned: JobAssigned, backend: Backend, cluster: str) -> JobRun:
    """The run of an assignment: its job rendered for the backend, its conditions kept."""
    job = parse_job(assigned.job)
    rendered = render_job(
        job,
        backend.network(),
        attempt=assigned.attempt,
        wait_for_master=backend.init_containers,
        gang=backend.gang_scheduling,
    )
    return JobRun(rendered, cluster, assigned.attempt, conditions=assigned.conditions)


@dataclass
class Placements:
    """What a cluster's assignments topic says, read from its start to its end."""

    wanted: dict[str, JobAssigned] = field(default_factory=dict)
    """The newest assignment of each job still placed here."""
    revoked: dict[str, int] = field(default_factory=dict)
    """Jobs whose newest event here is a revocation, with the attempt it ends."""


class Adoption:
    """`adopt` once at start (before the assignments are consumed), `sweep` whenever the hub
    may have moved jobs away unheard (every job's lock is held then)."""

    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        backend: Backend,
        runs: dict[str, JobRun],
        *,
        cluster: str,
        forget: Callable[[JobRun], None],
        count_jobs: Callable[[], None],
        fence: EpochFence | None = None,
    ) -> None:
        self._bus = bus
        self._fence = fence
        """The worker's fence of hub epochs, shared with its assignments consumer."""
        self._topics = topics
        self._backend = backend
        self._runs = runs
        self._cluster = cluster
        self._forget = forget
        self._count_jobs = count_jobs
        self.outdated_below: dict[str, int] = {}
        """Per job, from the assignments topic as it stood at start: the attempts below this
        one were revoked or replaced there, so their assignments, still to be read past the
        committed offset, must not start pods only to delete them."""

    def _extra(self, uid: str | None = None) -> dict[str, str | None]:
        return {"cluster": self._cluster, "job": uid}

    def outdated(self, assigned: JobAssigned) -> bool:
        """The assignment was revoked or replaced while this worker was away."""
        return assigned.attempt < self.outdated_below.get(assigned.uid, 0)

    async def adopt(self) -> None:
        """After a restart: take back the jobs whose objects are still in the cluster, and
        delete the objects of jobs that were revoked or that this cluster never had.

        A transient refusal is tried again a few times, then start fails; a refusal for good
        (an identity that may not list cluster-wide) means running without adoption."""
        await retry_transient(
            self._adopt_once, ADOPTION_RETRY, transient=is_transient, on_retry=self._not_yet
        )

    async def _adopt_once(self) -> None:
        placements = await self._replay_assignments()
        self.outdated_below = {
            **{uid: a.attempt for uid, a in placements.wanted.items()},
            **{uid: ended + 1 for uid, ended in placements.revoked.items()},
        }
        await self._reconcile(adopt=True, placements=placements)

    def _not_yet(self, error: BaseException, failures: int, wait: float) -> None:
        log.warning("cannot adopt yet, trying again: %s", error, extra=self._extra())

    async def sweep(self) -> None:
        """Delete the objects of jobs the hub took away while this worker could not hear it,
        and drop their runs (every job's lock is held)."""
        log.info("sweeping the jobs no longer assigned here", extra=self._extra())
        await self._reconcile(adopt=False)

    async def _reconcile(self, *, adopt: bool, placements: Placements | None = None) -> None:
        """Make the cluster agree with the assignments topic (its newest event per job): the
        objects of jobs not assigned here go, and so do the runs of jobs revoked here; with
        `adopt`, jobs still assigned here whose objects exist get a run back.

        Adopted runs create nothing: the backend's first listing reports their pods, and status
        continues from there. Every job's lock is held, or nothing else runs yet."""
        try:
            existing = await self._backend.job_uids()
        except BackendError as error:
            if error.transient:
                raise
            # E.g. an identity that may not list cluster-wide: only the runs in hand are known.
            log.warning("cannot look for the jobs in the cluster: %s", error, extra=self._extra())
            existing = set()
        if not existing and not self._runs:
            return
        if placements is None:
            placements = await self._replay_assignments()
        for uid in sorted(existing | set(self._runs)):
            run = self._runs.get(uid)
            assigned = placements.wanted.get(uid)
            if assigned is not None:
                if adopt and run is None:
                    adopted = assigned_run(assigned, self._backend, self._cluster)
                    self._runs[adopted.job.uid] = adopted
                    log.info("adopted a running job", extra=self._extra(adopted.job.uid))
                continue
            ended = placements.revoked.get(uid)
            if run is not None and (ended is None or ended < run.attempt):
                continue  # its assignment left the topic's retention: not a revocation
            log.warning("deleting objects of a job not assigned here", extra=self._extra(uid))
            await self._backend.delete_job(uid, run.job.metadata.namespace if run else None)
            if run is not None:
                self._forget(run)
        self._count_jobs()

    async def _replay_assignments(self) -> Placements:
        """The newest assignment or revocation of each job, from the whole topic."""
        placements = Placements()
        wanted, revoked = placements.wanted, placements.revoked
        topic = self._topics.assignments(self._cluster)
        async for event in events_to_end(self._bus, topic, fence=self._fence):
            try:
                if event.type == EventType.JOB_ASSIGNED:
                    assigned = event.data_as(JobAssigned)
                    wanted[assigned.uid] = assigned
                    revoked.pop(assigned.uid, None)
                elif event.type == EventType.JOB_REVOKED:
                    revocation = event.data_as(JobRevoked)
                    known = wanted.get(revocation.uid)
                    if known is None or known.attempt <= revocation.attempt:
                        wanted.pop(revocation.uid, None)
                        revoked[revocation.uid] = revocation.attempt
            except ValueError:
                continue  # the live consumer dead-letters it
        return placements
