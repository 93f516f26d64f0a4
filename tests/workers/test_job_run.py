"""The status machine of one run, driven by pod phases, exit codes and a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from schemas.errors import JobInvalid
from schemas.job_parsing import parse_job
from schemas.status import JobPhase
from tests.workers.job_documents import job_document, phase_of, rendered, replica
from workers.backends.base import PodObservation, PodPhase
from workers.job_run import Decision, JobRun


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def make_run(document: dict[str, Any], clock: FakeClock | None = None) -> JobRun:
    return JobRun(rendered(document), "east", 1, clock=clock or FakeClock())


def jax(name: str = "j", workers: int = 2, **kwargs: Any) -> dict[str, Any]:
    policy = kwargs.pop("restart_policy", "Never")
    run_policy = kwargs.pop("run_policy", None)
    return job_document(
        "JAXJob",
        name,
        {"Worker": replica(workers, restart_policy=policy)},
        run_policy=run_policy,
        **kwargs,
    )


def see(
    run: JobRun, pod: str, phase: PodPhase, code: int | None = None, message: str | None = None
) -> Decision:
    return run.observe(PodObservation(run.job.uid, pod, phase, code, message))


def conditions(run: JobRun) -> list[tuple[str, str, str | None]]:
    return [(c.type, c.status, c.reason) for c in run.status.conditions]


def names(plans: list[Any]) -> list[str]:
    return [p.name for p in plans]


# -- conditions and phases -----------------------------------------------------------------


def test_created_running_succeeded_with_times_and_replica_statuses() -> None:
    clock = FakeClock()
    run = make_run(jax(), clock)
    assert conditions(run) == [("Created", "True", "JAXJobCreated")]
    start = run.start()
    assert names(start.create) == ["j-worker-0", "j-worker-1"]
    assert run.status.startTime == clock.now
    assert see(run, "j-worker-0", "Pending").changed is False
    clock.advance(5)
    running = see(run, "j-worker-0", "Running")
    assert running.changed and run.phase == JobPhase.RUNNING
    assert run.status.replicaStatuses["Worker"].active == 2
    assert run.status.replicaStatuses["Worker"].selector == (
        "training.kubeflow.org/job-name=j,training.kubeflow.org/operator-name=trainhub,"
        "training.kubeflow.org/replica-type=worker"
    )
    selected = dict(p.split("=") for p in run.status.replicaStatuses["Worker"].selector.split(","))
    assert all(selected.items() <= plan.labels.items() for plan in start.create)  # it selects them
    see(run, "j-worker-1", "Running")
    assert not see(run, "j-worker-0", "Succeeded", 0).finished
    clock.advance(5)
    done = see(run, "j-worker-1", "Succeeded", 0)
    assert done.finished and done.changed and done.delete == []  # cleanPodPolicy None
    assert phase_of(run) == JobPhase.SUCCEEDED
    assert run.status.completionTime == clock.now
    assert conditions(run) == [
        ("Created", "True", "JAXJobCreated"),
        ("Running", "False", "JAXJobRunning"),
        ("Succeeded", "True", "JAXJobSucceeded"),
    ]
    worker = run.status.replicaStatuses["Worker"]
    assert (worker.active, worker.succeeded, worker.failed) == (0, 2, 0)


def test_running_and_restarting_replace_each_other_and_the_latest_is_last() -> None:
    run = make_run(jax(restart_policy="OnFailure"))
    run.start()
    see(run, "j-worker-0", "Running")
    see(run, "j-worker-1", "Running")
    restart = see(run, "j-worker-1", "Failed", 1)
    assert names(restart.restart) == ["j-worker-1"]
    assert run.phase == JobPhase.RESTARTING
    assert conditions(run) == [
        ("Created", "True", "JAXJobCreated"),
        ("Restarting", "True", "JAXJobRestarting"),
    ]
    assert run.status.conditions[-1].message == (
        "JAXJob j is restarting because j-worker-1 exited with code 1 (restart 1)."
    )
    see(run, "j-worker-1", "Running")
    assert conditions(run)[-1] == ("Running", "True", "JAXJobRunning")
    assert [c[0] for c in conditions(run)] == ["Created", "Running"]


def test_a_restart_says_why_the_backend_could_not_run_the_pod() -> None:
    run = make_run(jax(restart_policy="OnFailure"))
    run.start()
    see(run, "j-worker-0", "Running")
    see(run, "j-worker-1", "Failed", 127, "the local backend needs a command")
    assert run.phase == JobPhase.RESTARTING
    assert run.status.conditions[-1].message == (
        "JAXJob j is restarting because j-worker-1 exited with code 127 (restart 1). "
        "the local backend needs a command"
    )


def test_nothing_changes_after_failed() -> None:
    run = make_run(jax())
    run.start()
    see(run, "j-worker-0", "Running")
    failed = see(run, "j-worker-1", "Failed", 3)
    assert failed.finished and run.phase == JobPhase.FAILED
    before = run.status.model_copy(deep=True)
    for later in (see(run, "j-worker-0", "Succeeded", 0), run.suspend(), run.resume()):
        assert later == Decision()
    assert run.status == before
    assert conditions(run)[-1] == ("Failed", "True", "JAXJobFailed")
    assert run.status.condition("Running").status == "False"  # type: ignore[union-attr]


# -- restartPolicy and backoffLimit ---------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "code", "restarts"),
    [
        ("Always", 0, True),
        ("Always", 1, True),
        ("OnFailure", 2, True),
        ("Never", 137, False),
        ("ExitCode", 137, True),
        ("ExitCode", 128, True),
        ("ExitCode", 127, False),
        ("ExitCode", 1, False),
        ("ExitCode", None, True),
    ],
)
def test_restart_policy_decides_between_restart_and_failure(
    policy: str, code: int | None, restarts: bool
) -> None:
    run = make_run(jax(restart_policy=policy))
    run.start()
    see(run, "j-worker-0", "Running")
    decision = see(run, "j-worker-0", "Failed", code)
    if restarts:
        assert names(decision.restart) == ["j-worker-0"]
        assert run.phase == JobPhase.RESTARTING and run.restarts == 1
        assert run.pods["j-worker-0"].phase == "Pending"
    else:
        assert decision.restart == [] and decision.finished
        assert run.phase == JobPhase.FAILED
        assert f"(restartPolicy {policy})" in (run.status.conditions[-1].message or "")


def test_exit_code_restarts_count_against_the_backoff_limit() -> None:
    run = make_run(jax(restart_policy="ExitCode", run_policy={"backoffLimit": 2}))
    run.start()
    see(run, "j-worker-0", "Running")
    see(run, "j-worker-1", "Running")
    for attempt in (1, 2):
        decision = see(run, "j-worker-0", "Failed", 137)
        assert names(decision.restart) == ["j-worker-0"], attempt
        see(run, "j-worker-0", "Running")
    third = see(run, "j-worker-0", "Failed", 143)
    assert third.restart == [] and third.finished
    assert run.restarts == 3
    assert conditions(run)[-1] == ("Failed", "True", "JAXJobFailed")
    assert run.status.conditions[-1].message == (
        "Job j has failed because it has reached the specified backoff limit (2): "
        "j-worker-0 exited with code 143."
    )
    # The limit stops the job: worker-1, still running, goes even under cleanPodPolicy None.
    assert names(third.delete) == ["j-worker-1"]


def test_backoff_limit_zero_fails_at_the_first_retryable_failure() -> None:
    run = make_run(jax(restart_policy="OnFailure", run_policy={"backoffLimit": 0}))
    run.start()
    decision = see(run, "j-worker-1", "Failed", 1)
    assert decision.restart == [] and run.phase == JobPhase.FAILED


# -- cleanPodPolicy -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "deleted"),
    [
        ("All", ["j-worker-0", "j-worker-1", "j-worker-2"]),
        ("Running", ["j-worker-1", "j-worker-2"]),
        ("None", []),
        (None, []),
    ],
)
def test_clean_pod_policy_applies_when_the_job_finishes(
    policy: str | None, deleted: list[str]
) -> None:
    run_policy = {"cleanPodPolicy": policy} if policy else {}
    run = make_run(jax(workers=3, run_policy=run_policy))
    run.start()
    see(run, "j-worker-0", "Running")
    see(run, "j-worker-1", "Running")  # worker-2 stays Pending: Running counts it too
    decision = see(run, "j-worker-0", "Failed", 1)
    assert decision.finished
    assert names(decision.delete) == deleted


def test_mpijob_deprecated_clean_pod_policy_still_counts() -> None:
    document = job_document(
        "MPIJob",
        "m",
        {"Launcher": replica(1), "Worker": replica(2)},
        cleanPodPolicy="Running",
    )
    run = make_run(document)
    run.start()
    for pod in ("m-launcher", "m-worker-0", "m-worker-1"):
        see(run, pod, "Running")
    decision = see(run, "m-launcher", "Succeeded", 0)
    assert decision.finished and run.phase == JobPhase.SUCCEEDED  # the launcher decides
    assert names(decision.delete) == ["m-worker-0", "m-worker-1"]


def test_mpijob_host_discovery_follows_the_running_workers() -> None:
    document = job_document("MPIJob", "m", {"Launcher": replica(1), "Worker": replica(3)})
    document["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "OnFailure"
    run = make_run(document)
    run.start()

    def discovered(decision: Decision) -> list[str] | None:
        """The hosts a decision writes into discover_hosts.sh (None: no write)."""
        if not decision.config_maps:
            return None
        (plan,) = decision.config_maps
        assert plan.name == "m-config" and plan.labels == run.rendered.config_maps[0].labels
        return [line.split()[1] for line in plan.data["discover_hosts.sh"].splitlines()[1:]]

    assert discovered(see(run, "m-launcher", "Running")) is None
    assert discovered(see(run, "m-worker-1", "Pending")) is None
    assert discovered(see(run, "m-worker-1", "Running")) == ["m-worker-1:1"]
    assert discovered(see(run, "m-worker-1", "Running")) is None  # nothing new: no write
    assert discovered(see(run, "m-worker-0", "Running")) == ["m-worker-0:1", "m-worker-1:1"]
    # A worker that fails is made again; until it runs it is not a host.
    restarted = see(run, "m-worker-0", "Failed", 1)
    assert names(restarted.restart) == ["m-worker-0"]
    assert discovered(restarted) == ["m-worker-1:1"]
    assert discovered(see(run, "m-worker-0", "Running")) == ["m-worker-0:1", "m-worker-1:1"]
    finished = see(run, "m-launcher", "Succeeded", 0)
    assert finished.finished and discovered(finished) is None


# -- activeDeadlineSeconds and ttlSecondsAfterFinished ---------------------------------------


def test_active_deadline_counts_from_start_time_and_fails_the_job() -> None:
    clock = FakeClock()
    run = make_run(jax(run_policy={"activeDeadlineSeconds": 60, "cleanPodPolicy": "None"}), clock)
    assert run.deadline() is None  # not started yet
    run.start()
    assert run.deadline() == clock.now + timedelta(seconds=60)
    see(run, "j-worker-0", "Running")
    see(run, "j-worker-1", "Succeeded", 0)
    clock.advance(59.9)
    assert run.expire_deadline() == Decision()
    clock.advance(0.1)
    decision = run.expire_deadline()
    assert decision.finished and decision.changed
    assert run.phase == JobPhase.FAILED
    last = run.status.conditions[-1]
    # Upstream's reason and message, word for word.
    assert (last.type, last.reason) == ("Failed", "JAXJobFailed")
    assert last.message == "Job j has failed because it was active longer than specified deadline"
    assert run.status.completionTime == clock.now
    # The running pod is stopped; the finished one stays for its logs (cleanPodPolicy None).
    assert names(decision.delete) == ["j-worker-0"]
    assert run.deadline() is None and run.next_timer() is None


def test_a_deadline_or_ttl_past_year_9999_is_never() -> None:
    # Valid int64 seconds that no datetime holds: never, not an OverflowError in the
    # worker's timer task (which stopped the worker carrying out later assignments).
    clock = FakeClock()
    policy = {"activeDeadlineSeconds": 10**14, "ttlSecondsAfterFinished": 2**31 - 1}
    run = make_run(jax(workers=1, run_policy=policy), clock)
    run.start()
    assert run.deadline() is None and run.next_timer() is None
    assert run.expire_deadline() == Decision()
    see(run, "j-worker-0", "Succeeded", 0)
    assert run.expiry() == clock.now + timedelta(seconds=2**31 - 1)


def test_run_policy_numbers_keep_upstream_s_int_sizes() -> None:
    for field, too_big in (
        ("ttlSecondsAfterFinished", 2**31),
        ("backoffLimit", 2**31),
        ("activeDeadlineSeconds", 2**63),
    ):
        with pytest.raises(JobInvalid, match=field):
            parse_job(jax(run_policy={field: too_big}))


def test_deadline_with_clean_pod_policy_all_deletes_every_pod() -> None:
    clock = FakeClock()
    run = make_run(jax(run_policy={"activeDeadlineSeconds": 1, "cleanPodPolicy": "All"}), clock)
    run.start()
    see(run, "j-worker-1", "Succeeded", 0)
    clock.advance(1)
    assert names(run.expire_deadline().delete) == ["j-worker-0", "j-worker-1"]


def test_no_deadline_after_success() -> None:
    clock = FakeClock()
    run = make_run(jax(workers=1, run_policy={"activeDeadlineSeconds": 5}), clock)
    run.start()
    see(run, "j-worker-0", "Succeeded", 0)
    clock.advance(10)
    assert run.expire_deadline() == Decision()
    assert run.phase == JobPhase.SUCCEEDED


def test_ttl_expiry_is_counted_from_completion() -> None:
    clock = FakeClock()
    run = make_run(jax(workers=1, run_policy={"ttlSecondsAfterFinished": 30}), clock)
    run.start()
    assert run.expiry() is None
    clock.advance(7)
    see(run, "j-worker-0", "Failed", 2)
    assert run.expiry() == clock.now + timedelta(seconds=30)
    assert run.next_timer() == run.expiry()


# -- suspend and resume ---------------------------------------------------------------------


def test_suspend_deletes_pods_and_resume_recreates_them_with_a_new_start_time() -> None:
    clock = FakeClock()
    run = make_run(jax(run_policy={"activeDeadlineSeconds": 100}), clock)
    run.start()
    started = run.status.startTime
    see(run, "j-worker-0", "Running")
    see(run, "j-worker-1", "Succeeded", 0)
    clock.advance(30)

    suspended = run.suspend()
    assert names(suspended.delete) == ["j-worker-0", "j-worker-1"] and suspended.changed
    assert run.phase == JobPhase.SUSPENDED and run.suspended
    assert conditions(run) == [
        ("Created", "True", "JAXJobCreated"),
        ("Running", "False", "JAXJobSuspended"),
        ("Suspended", "True", "JAXJobSuspended"),
    ]
    assert run.status.conditions[-1].message == "JAXJob j is suspended."
    assert run.status.replicaStatuses["Worker"].active == 0
    assert run.deadline() is None  # no deadline runs while suspended
    assert run.suspend() == Decision()  # twice is once
    assert see(run, "j-worker-0", "Failed", 137) == Decision()  # the deleted pods are gone

    clock.advance(500)
    resumed = run.resume()
    assert names(resumed.create) == ["j-worker-0", "j-worker-1"] and resumed.changed
    assert run.status.startTime == clock.now != started
    assert run.deadline() == clock.now + timedelta(seconds=100)
    assert conditions(run)[-1] == ("Suspended", "False", "JAXJobResumed")
    assert run.status.conditions[-1].message == "JAXJob j is resumed."
    assert phase_of(run) == JobPhase.CREATED
    # Every pod runs again, the one that had succeeded too.
    assert {p.phase for p in run.pods.values()} == {"Pending"}
    assert run.resume() == Decision()
    see(run, "j-worker-0", "Running")
    assert conditions(run)[-1] == ("Running", "True", "JAXJobRunning")
    see(run, "j-worker-0", "Succeeded", 0)
    assert see(run, "j-worker-1", "Succeeded", 0).finished


def test_a_job_that_arrives_suspended_creates_nothing_until_resumed() -> None:
    clock = FakeClock()
    run = make_run(jax(run_policy={"suspend": True, "activeDeadlineSeconds": 5}), clock)
    decision = run.start()
    assert decision.create == [] and decision.delete == [] and decision.changed
    assert run.phase == JobPhase.SUSPENDED and run.status.startTime is None
    assert run.next_timer() is None
    clock.advance(60)
    assert names(run.resume().create) == ["j-worker-0", "j-worker-1"]
    assert run.status.startTime == clock.now


def test_a_finished_job_is_not_suspended() -> None:
    run = make_run(jax(workers=1))
    run.start()
    see(run, "j-worker-0", "Succeeded", 0)
    assert run.suspend() == Decision() and run.phase == JobPhase.SUCCEEDED


# -- the scheduler's word -------------------------------------------------------------------


def test_unschedulable_message_is_recorded_once_per_change_and_cleared_by_running() -> None:
    clock = FakeClock()
    run = make_run(jax(), clock)
    run.start()
    message = "Unschedulable: 0/2 nodes are available: 2 Insufficient cpu."
    first = see(run, "j-worker-1", "Pending", message=message)
    assert first.unschedulable and not first.changed
    assert run.pending_reason == message
    assert run.unschedulable_since == clock.now.timestamp()
    clock.advance(3)
    assert not see(run, "j-worker-1", "Pending", message=message).unschedulable
    assert run.unschedulable_since == (clock.now - timedelta(seconds=3)).timestamp()
    other = "Unschedulable: 0/2 nodes are available: 2 Insufficient memory."
    assert see(run, "j-worker-1", "Pending", message=other).unschedulable
    see(run, "j-worker-1", "Running")
    assert run.pending_reason is None and run.unschedulable_since is None
    assert run.phase == JobPhase.RUNNING


# -- success rules that need the replica indexes ----------------------------------------------


def tf(policy: str | None = None) -> dict[str, Any]:
    extra: dict[str, Any] = {"successPolicy": policy} if policy is not None else {}
    return job_document("TFJob", "t", {"PS": replica(1), "Worker": replica(3)}, **extra)


def test_tfjob_without_chief_succeeds_when_worker_0_does() -> None:
    run = make_run(tf())
    run.start()
    for pod in ("t-ps-0", "t-worker-0", "t-worker-1", "t-worker-2"):
        see(run, pod, "Running")
    assert not see(run, "t-worker-2", "Succeeded", 0).finished  # not worker 0
    assert see(run, "t-worker-0", "Succeeded", 0).finished
    assert run.counts()["Worker"].succeeded_indexes == frozenset({0, 2})


def test_tfjob_all_workers_policy_waits_for_every_worker() -> None:
    run = make_run(tf("AllWorkers"))
    run.start()
    assert not see(run, "t-worker-0", "Succeeded", 0).finished
    assert not see(run, "t-worker-1", "Succeeded", 0).finished
    assert see(run, "t-worker-2", "Succeeded", 0).finished


def test_pytorch_master_decides_and_elastic_any_worker_does() -> None:
    plain = make_run(job_document("PyTorchJob", "p", {"Master": replica(1), "Worker": replica(2)}))
    plain.start()
    assert not see(plain, "p-worker-0", "Succeeded", 0).finished
    assert see(plain, "p-master-0", "Succeeded", 0).finished

    elastic = make_run(
        job_document(
            "PyTorchJob",
            "e",
            {"Worker": replica(3)},
            elasticPolicy={"minReplicas": 1, "maxReplicas": 3},
        )
    )
    elastic.start()
    assert see(elastic, "e-worker-2", "Succeeded", 0).finished


def test_a_succeeded_job_reports_its_still_active_replicas_as_succeeded() -> None:
    # Upstream: once the job succeeded, Active is added to Succeeded and set to 0.
    run = make_run(
        job_document("TFJob", "t", {"Chief": replica(1), "Worker": replica(2)}, run_policy={})
    )
    run.start()
    for pod in ("t-chief-0", "t-worker-0", "t-worker-1"):
        see(run, pod, "Running")
    assert run.status.replicaStatuses["Worker"].active == 2
    done = see(run, "t-chief-0", "Succeeded", 0)
    assert done.finished and run.phase == JobPhase.SUCCEEDED
    workers = run.status.replicaStatuses["Worker"]
    assert (workers.active, workers.succeeded, workers.failed) == (0, 2, 0)
    chief = run.status.replicaStatuses["Chief"]
    assert (chief.active, chief.succeeded) == (0, 1)


def test_a_failed_job_keeps_its_active_replicas_active() -> None:
    run = make_run(jax())
    run.start()
    see(run, "j-worker-0", "Running")
    assert see(run, "j-worker-1", "Failed", 1).finished
    workers = run.status.replicaStatuses["Worker"]
    assert (workers.active, workers.succeeded, workers.failed) == (1, 0, 1)


def test_tfjob_dynamic_workers_may_fail_and_the_chief_decides() -> None:
    document = job_document(
        "TFJob",
        "d",
        {"Chief": replica(1), "Worker": replica(2, restart_policy="Never")},
        enableDynamicWorker=True,
    )
    run = make_run(document)
    run.start()
    for pod in ("d-chief-0", "d-worker-0", "d-worker-1"):
        see(run, pod, "Running")
    failed = see(run, "d-worker-0", "Failed", 1)
    assert not failed.finished and failed.changed and failed.restart == []
    assert run.phase == JobPhase.RUNNING
    assert run.status.replicaStatuses["Worker"].failed == 1
    assert see(run, "d-chief-0", "Succeeded", 0).finished
    assert phase_of(run) == JobPhase.SUCCEEDED
    # Without the flag a failed worker fails the job, and the chief's failure always does.
    plain = make_run(job_document("TFJob", "p", {"Chief": replica(1), "Worker": replica(2)}))
    plain.start()
    assert see(plain, "p-worker-0", "Failed", 1).finished
    dynamic = make_run(document)
    dynamic.start()
    assert see(dynamic, "d-chief-0", "Failed", 1).finished


def test_an_always_pod_that_exits_zero_is_restarted_not_succeeded() -> None:
    # A kubelet restarts an Always container whatever its exit code; sim and local report
    # the exit, so the run restarts the pod itself and counts it against the backoff limit.
    run = make_run(jax(restart_policy="Always", run_policy={"backoffLimit": 1}))
    run.start()
    see(run, "j-worker-0", "Running")
    first = see(run, "j-worker-0", "Succeeded", 0)
    assert names(first.restart) == ["j-worker-0"] and not first.finished
    assert run.phase == JobPhase.RESTARTING and run.restarts == 1
    see(run, "j-worker-0", "Running")
    second = see(run, "j-worker-0", "Succeeded", 0)
    assert second.finished and phase_of(run) == JobPhase.FAILED
    assert "backoff limit" in (run.status.conditions[-1].message or "")


def test_a_run_taken_back_with_its_conditions_shows_running_once_its_pods_run() -> None:
    first = make_run(jax("adopted", workers=1))
    see(first, "adopted-worker-0", "Running")
    assert first.phase == JobPhase.RUNNING
    # A restarted worker takes the job back with the conditions its assignment carried.
    again = JobRun(
        rendered(jax("adopted", workers=1)),
        "east",
        1,
        conditions=first.status.conditions,
        clock=FakeClock(),
    )
    assert again.phase == JobPhase.CREATED
    decision = see(again, "adopted-worker-0", "Running")
    assert phase_of(again) == JobPhase.RUNNING and decision.changed
