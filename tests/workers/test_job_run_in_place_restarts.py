"""Restarts the kubelet makes in place (restartPolicy OnFailure or Always on a real cluster):
the pod stays, its containers' restart counts go up, and the run counts them against the same
backoffLimit as the pods it re-creates itself."""

from __future__ import annotations

from typing import Any

from schemas.status import JobPhase
from tests.workers.job_documents import job_document, phase_of, rendered, replica
from workers.backends.base import PodObservation, PodPhase
from workers.job_run import Decision, JobRun


def make_run(restart_policy: str, **run_policy: Any) -> JobRun:
    document = job_document(
        "PyTorchJob",
        "t",
        {
            "Master": replica(1, restart_policy=restart_policy),
            "Worker": replica(1, restart_policy=restart_policy),
        },
        run_policy=run_policy,
    )
    return JobRun(rendered(document), "east", 1)


def see(
    run: JobRun,
    pod: str,
    phase: PodPhase,
    *,
    restarts: int = 0,
    restarting: bool = False,
    code: int | None = None,
    uid: str | None = None,
) -> Decision:
    observation = PodObservation(
        run.job.uid,
        pod,
        phase,
        exit_code=code,
        restarts=restarts,
        restarting=restarting,
        uid=uid or f"uid-{pod}",
    )
    return run.observe(observation)


def latest(run: JobRun) -> tuple[str, str | None, str | None]:
    condition = run.status.conditions[-1]
    return condition.type, condition.reason, condition.message


def crash(run: JobRun, pod: str, count: int, code: int = 1) -> None:
    """The kubelet's sequence for one exit, as the observer reports it: backing off (the
    exit counted, not yet in restartCount), then the new container running."""
    see(run, pod, "Running", restarts=count, restarting=True, code=code)
    see(run, pod, "Running", restarts=count, code=code)


def test_each_in_place_restart_shows_restarting_then_running_again() -> None:
    run = make_run("OnFailure", backoffLimit=3)
    run.start()
    see(run, "t-master-0", "Running")
    see(run, "t-worker-0", "Running")
    assert run.phase == JobPhase.RUNNING
    for count in (1, 2):
        backing_off = see(run, "t-worker-0", "Running", restarts=count, restarting=True, code=1)
        # Nothing to delete or create: the kubelet restarts the container itself.
        assert backing_off.restart == backing_off.delete == backing_off.create == []
        assert backing_off.changed and backing_off.restarted_in_place == 1
        assert phase_of(run) == JobPhase.RESTARTING
        assert latest(run) == (
            "Restarting",
            "PyTorchJobRestarting",
            f"PyTorchJob t is restarting because t-worker-0 exited with code 1 (restart {count}).",
        )
        running = see(run, "t-worker-0", "Running", restarts=count, code=1)
        assert running.changed and running.restarted_in_place == 0
        assert run.phase == JobPhase.RUNNING
        assert run.status.replicaStatuses["Worker"].active == 1
    assert run.restarts == 2


def test_restarts_past_the_backoff_limit_fail_the_job_and_stop_its_pods() -> None:
    run = make_run("OnFailure", backoffLimit=2)
    run.start()
    see(run, "t-master-0", "Running")
    see(run, "t-worker-0", "Running")
    crash(run, "t-worker-0", 1)
    crash(run, "t-worker-0", 2, code=137)
    third = see(run, "t-worker-0", "Running", restarts=3, restarting=True, code=3)
    assert third.finished and third.changed and run.restarts == 3
    assert latest(run) == (
        "Failed",
        "PyTorchJobFailed",
        "Job t has failed because it has reached the specified backoff limit (2): "
        "t-worker-0 exited with code 3.",
    )
    assert run.status.completionTime is not None
    # The crash-looping pod and the master, both still active, go (cleanPodPolicy None).
    assert sorted(p.name for p in third.delete) == ["t-master-0", "t-worker-0"]
    # Running (which had replaced Restarting) is False once the job finished.
    conditions = {c.type: c.status for c in run.status.conditions}
    assert conditions["Running"] == "False" and "Restarting" not in conditions


def test_restarts_of_every_pod_add_up() -> None:
    run = make_run("Always", backoffLimit=1)
    run.start()
    see(run, "t-master-0", "Running")
    see(run, "t-worker-0", "Running")
    crash(run, "t-master-0", 1, code=0)  # under Always a clean exit restarts too
    assert run.phase == JobPhase.RUNNING and run.restarts == 1
    decision = see(run, "t-worker-0", "Running", restarts=1, restarting=True, code=1)
    assert decision.finished and phase_of(run) == JobPhase.FAILED and run.restarts == 2


def test_several_restarts_seen_at_once_count_as_many() -> None:
    """After a relist or an adoption the counts jump; the container already runs again."""
    run = make_run("OnFailure", backoffLimit=5)
    run.start()
    see(run, "t-master-0", "Running")
    decision = see(run, "t-worker-0", "Running", restarts=3, code=1)
    assert decision.restarted_in_place == 3 and run.restarts == 3
    assert run.phase == JobPhase.RUNNING
    assert see(run, "t-worker-0", "Running", restarts=3, code=1) == Decision()


def test_a_backing_off_container_counts_once() -> None:
    run = make_run("OnFailure", backoffLimit=5)
    run.start()
    see(run, "t-worker-0", "Running")
    see(run, "t-worker-0", "Running", restarts=1, restarting=True, code=1)
    again = see(run, "t-worker-0", "Running", restarts=1, restarting=True, code=1)
    assert not again.changed and again.restarted_in_place == 0
    assert run.restarts == 1 and run.phase == JobPhase.RESTARTING


def test_a_new_pod_under_the_name_counts_its_own_restarts() -> None:
    run = make_run("OnFailure", backoffLimit=5)
    run.start()
    see(run, "t-worker-0", "Running", restarts=2, code=1, uid="first")
    assert run.restarts == 2
    # Evicted: the pod fails as a whole and is re-created under its name.
    failed = see(run, "t-worker-0", "Failed", restarts=2, code=137, uid="first")
    assert [p.name for p in failed.restart] == ["t-worker-0"] and run.restarts == 3
    see(run, "t-worker-0", "Running", uid="second")
    assert run.restarts == 3
    see(run, "t-worker-0", "Running", restarts=1, restarting=True, code=1, uid="second")
    assert run.restarts == 4


def test_restarts_first_seen_on_a_pod_that_succeeded_are_history() -> None:
    run = make_run("OnFailure", backoffLimit=0)
    run.start()
    see(run, "t-worker-0", "Running")
    done = see(run, "t-master-0", "Succeeded", restarts=2, code=0)
    assert done.finished and run.phase == JobPhase.SUCCEEDED and run.restarts == 0
