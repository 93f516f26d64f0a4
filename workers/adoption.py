"""Making a cluster agree with its assignments topic: at start, taking back the jobs whose pods
are still there after a restart; after an outage, deleting the objects of jobs the hub took
away meanwhile (a sweep). Neither leaves the pods of a revoked job behind.

At start it also finds the jobs assigned here whose own object (their CR, in direct or
delegate mode) went with everything it owned while no worker watched (a garbage collector
took them): `vanished`, which the worker fails once its assignments consumer has shown
which of them it had not carried out yet (see `Worker`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from bus.base import Bus, TopicPartition
from bus.epochs import EpochFence
from bus.events import events_to_end
from bus.retry import retry_transient
from bus.topics import Topics
from schemas.events import EventType, JobAssigned, JobRevoked
from schemas.job_parsing import parse_placed_job
from workers.backends.base import BACKEND_RETRY, Backend, BackendError, is_transient
from workers.job_run import JobRun
from workers.rendering import render_job

log = logging.getLogger(__name__)

ADOPTION_RETRY = replace(BACKEND_RETRY, attempts=5)
"""The adoption pass gives up starting after these tries (its Deployment restarts the
worker): running without that pass could leak the pods of jobs revoked while it was away."""


def assigned_run(assigned: JobAssigned, backend: Backend, cluster: str) -> JobRun:
    """The run of an assignment: its job rendered for the backend, its conditions kept."""
    # A TrainJob as the hub placed it: with the runtime the assignment carries.
    job = parse_placed_job(assigned.job, assigned.runtime)
    rendered = render_job(
        job,
        backend.network(),
        attempt=assigned.attempt,
        wait_for_master=backend.init_containers,
        gang=backend.gang_scheduling,
    )
    return JobRun(rendered, cluster, assigned.attempt, conditions=assigned.conditions)


_PENDING_S = 300.0
"""How long an assignment is remembered after it was written although its job has neither a
run nor objects here: the assignments consumer may not have carried it out yet. Past that,
and once a job's run has left and its objects are gone, what the topic said of it is let go:
a later sweep would only find nothing of it to keep or delete."""


class _Newest(NamedTuple):
    """A job's newest assignment or revocation on this cluster's assignments topic."""

    attempt: int
    revoked: bool
    """A revocation of `attempt`; else an assignment of it."""
    written: float
    """When it was written (seconds since the epoch)."""


class Adoption:
    """`adopt` once at start (before the assignments are consumed), `sweep` whenever the hub
    may have moved jobs away unheard (every job's lock is held then).

    Each pass reads the assignments topic on from where the previous one stopped (adoption
    from its start), and keeps of it only what matters to the jobs in hand: runs, objects in
    the cluster, assignments written in the last `_PENDING_S`. A sweep costs what came
    since the last one and what the cluster holds, not every assignment ever made."""

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
        self._topic = topics.assignments(cluster)
        self._backend = backend
        self._runs = runs
        self._cluster = cluster
        self._forget = forget
        self._count_jobs = count_jobs
        self._positions: dict[TopicPartition, int] = {}
        """Where the last pass's read of the assignments topic stopped, per partition."""
        self._newest: dict[str, _Newest] = {}
        """What the topic said last of each job that still matters here (see the class)."""
        self.events_read = 0
        """Events of the assignments topic the latest pass read (for tests and logs)."""
        self.vanished: dict[str, JobAssigned] = {}
        """From the start's pass: the newest assignment of each job assigned here, neither
        revoked nor held, that would have its own object here but has nothing left in the
        cluster. Its assignment was carried out and its object deleted with all it owned
        while no worker watched, or it is still to be carried out (past the consumer's
        committed offset), or it ended and its objects went after ttlSecondsAfterFinished
        (the hub ignores a status of a job that ended)."""
        self.read_to: dict[TopicPartition, int] = {}
        """Where the start's read of the assignments topic ended, per partition."""
        self.outdated_below: dict[str, int] = {}
        """Per job, from the assignments topic as it stood at start: the attempts below this
        one were revoked or replaced there, so their assignments, still to be read past the
        committed offset, must not start pods only to delete them. Only jobs for which that
        refuses something (a revocation, an attempt after the first) are kept."""

    def _extra(self, uid: str | None = None) -> dict[str, str | None]:
        return {"cluster": self._cluster, "job": uid}

    @property
    def remembered(self) -> int:
        """Jobs of which what the topic said is kept (bounded by the jobs in hand)."""
        return len(self._newest)

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
        # From the topic's start, each try: one interrupted after its read must not adopt
        # without the assignments that read consumed.
        self._positions.clear()
        self._newest.clear()
        self.outdated_below = {}
        existing = await self._existing()
        absent: dict[str, JobAssigned] = {}
        assigned = await self._read_on(existing, outdated=self.outdated_below, absent=absent)
        await self._reconcile(existing, adopt=assigned)
        self.vanished = {
            uid: assignment
            for uid, assignment in absent.items()
            if uid not in self._runs and self._would_own(assignment)
        }
        self.read_to = dict(self._positions)

    def _would_own(self, assigned: JobAssigned) -> bool:
        """Whether the assigned job has its own object in this cluster."""
        try:
            return self._backend.makes_job_object(parse_placed_job(assigned.job, assigned.runtime))
        except ValueError:  # (JobInvalid) the consumer dead-letters it
            return False

    def _not_yet(self, error: BaseException, failures: int, wait: float) -> None:
        log.warning("cannot adopt yet, trying again: %s", error, extra=self._extra())

    async def sweep(self) -> None:
        """Delete the objects of jobs the hub took away while this worker could not hear it,
        and drop their runs (every job's lock is held)."""
        log.info("sweeping the jobs no longer assigned here", extra=self._extra())
        existing = await self._existing()
        if not existing and not self._runs:
            # Nothing to judge; the next pass reads on from where this one would have.
            self._let_go(existing)
            return
        await self._read_on(existing)
        await self._reconcile(existing)

    async def _existing(self) -> set[str]:
        """The jobs with objects in the cluster; none known when listing is refused for good."""
        try:
            return await self._backend.job_uids()
        except BackendError as error:
            if error.transient:
                raise
            # E.g. an identity that may not list cluster-wide: only the runs in hand are known.
            log.warning("cannot look for the jobs in the cluster: %s", error, extra=self._extra())
            return set()

    async def _reconcile(
        self, existing: set[str], *, adopt: dict[str, JobAssigned] | None = None
    ) -> None:
        """Make the cluster agree with the assignments topic (its newest event per job): the
        objects of jobs not assigned here go, and so do the runs of jobs revoked here; with
        `adopt` (the newest assignment of each job with objects), jobs still assigned here
        whose objects exist get a run back.

        Adopted runs create nothing: the backend's first listing reports their pods, and status
        continues from there. Every job's lock is held, or nothing else runs yet."""
        if not existing and not self._runs:
            return
        deleted: set[str] = set()
        for uid in sorted(existing | set(self._runs)):
            run = self._runs.get(uid)
            newest = self._newest.get(uid)
            if newest is not None and not newest.revoked:
                if adopt is not None and run is None and uid in adopt:
                    adopted = assigned_run(adopt[uid], self._backend, self._cluster)
                    self._runs[adopted.job.uid] = adopted
                    log.info("adopted a running job", extra=self._extra(adopted.job.uid))
                continue
            ended = newest.attempt if newest is not None else None
            if run is not None and (ended is None or ended < run.attempt):
                continue  # its assignment left the topic's retention: not a revocation
            log.warning("deleting objects of a job not assigned here", extra=self._extra(uid))
            await self._backend.delete_job(uid, run.job.metadata.namespace if run else None)
            deleted.add(uid)
            if run is not None:
                self._forget(run)
        self._count_jobs()
        self._let_go(existing - deleted)

    async def _read_on(
        self,
        existing: set[str],
        *,
        outdated: dict[str, int] | None = None,
        absent: dict[str, JobAssigned] | None = None,
    ) -> dict[str, JobAssigned]:
        """Note the newest assignment or revocation of each job from the events written since
        the last read (all of them the first time). Returns the newest assignment of each job
        of `existing` among them; `outdated` gets `outdated_below`'s entries, `absent` the
        newest assignment, not revoked since, of each job not in `existing`."""
        documents: dict[str, JobAssigned] = {}
        newest = self._newest
        kept_since = time.time() - _PENDING_S
        read = 0
        async for event in events_to_end(
            self._bus, self._topic, fence=self._fence, positions=self._positions
        ):
            read += 1
            try:
                if event.type == EventType.JOB_ASSIGNED:
                    assigned = event.data_as(JobAssigned)
                    uid, attempt = assigned.uid, assigned.attempt
                    newest[uid] = _Newest(attempt, False, event.time.timestamp())
                    if uid in existing:
                        documents[uid] = assigned
                    elif absent is not None:
                        absent[uid] = assigned
                    if outdated is not None:
                        if attempt > 1:
                            outdated[uid] = attempt
                        else:
                            outdated.pop(uid, None)
                elif event.type == EventType.JOB_REVOKED:
                    revocation = event.data_as(JobRevoked)
                    uid, attempt = revocation.uid, revocation.attempt
                    known = newest.get(uid)
                    if known is not None and not known.revoked and known.attempt > attempt:
                        continue  # an older attempt's, after its successor's assignment
                    newest[uid] = _Newest(attempt, True, event.time.timestamp())
                    documents.pop(uid, None)
                    if absent is not None:
                        absent.pop(uid, None)
                    if outdated is not None:
                        outdated[uid] = attempt + 1
                else:
                    continue
            except ValueError:
                continue  # the live consumer dead-letters it
            # Kept only while it may matter: a long-finished job's assignment goes at once.
            if newest[uid].written < kept_since and uid not in existing and uid not in self._runs:
                del newest[uid]
        self.events_read = read
        return documents

    def _let_go(self, existing: set[str]) -> None:
        """Forget what the topic said of jobs with neither a run nor objects here any more,
        once their news is older than `_PENDING_S`."""
        kept_since = time.time() - _PENDING_S
        runs = self._runs
        gone = [
            uid
            for uid, news in self._newest.items()
            if news.written < kept_since and uid not in existing and uid not in runs
        ]
        for uid in gone:
            del self._newest[uid]
