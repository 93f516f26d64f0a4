"""TrainJob suspend and resume through the SDK and the hub, on the in-memory bus and `sim`:
`spec.suspend` (not the v1 kinds' `runPolicy.suspend`) holds a TrainJob, and its status
carries Kubeflow Trainer v2.0.0's conditions (Created, Suspended, Complete, Failed)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from bus.dead_letters import dead_letter_reason
from bus.memory import MemoryBus
from schemas.status import JobPhase
from schemas.trainer_runtimes import parse_runtime, runtime_catalog
from trainhub import AsyncTrainHubClient, cli_get_jobs, cli_jobs
from trainhub.cli_get_jobs import GetOutput, job_item, print_jobs, resource_name
from trainhub.cli_jobs import describe_text
from trainhub.cli_submit import managers
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.producer import update_document
from trainhub.sdk_errors import JobUpdateError
from trainhub.sdk_view import TrainHubJob
from trainhub.settings import TrainhubSettings
from workers.cluster_spec import parse_cluster_spec


def sim_runtime(name: str, duration: str, exit_code: int = 0) -> dict[str, Any]:
    """A plain runtime whose node pods run `duration` on `sim` and exit with `exit_code`."""
    annotations = {
        "trainhub.io/sim-duration": duration,
        "trainhub.io/sim-exit-code": str(exit_code),
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {
                                    "template": {
                                        "metadata": {"annotations": annotations},
                                        "spec": {
                                            "restartPolicy": "Never",
                                            "containers": [
                                                {"name": "node", "image": "python:3.11"}
                                            ],
                                        },
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


def trainjob(name: str, runtime: str, **spec: Any) -> dict[str, Any]:
    """As a user writes it: no managedBy (the SDK gives it trainhub's)."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": runtime},
            "trainer": {
                "numNodes": 2,
                "resourcesPerNode": {"requests": {"cpu": "1", "memory": "1Gi"}},
            },
            **spec,
        },
    }


@pytest.fixture
async def system(tmp_path: Path) -> AsyncIterator[Embedded]:
    catalog = runtime_catalog()
    catalog.add(parse_runtime(sim_runtime("sim-long", "6s")))
    catalog.add(parse_runtime(sim_runtime("sim-short", "0.3s")))
    catalog.add(parse_runtime(sim_runtime("sim-crash", "0.2s", exit_code=3)))
    options = EmbeddedOptions(
        clusters=[parse_cluster_spec("solo:cpu=4,memory=8Gi")],
        backend="sim",
        heartbeat_interval=0.2,
        logs_dir=tmp_path,
    )
    async with Embedded(options) as embedded:
        yield embedded


@pytest.fixture
async def client(system: Embedded) -> AsyncIterator[AsyncTrainHubClient]:
    async with AsyncTrainHubClient(settings=TrainhubSettings(), bus=system.bus) as sdk:
        yield sdk


def conditions(job: TrainHubJob) -> list[tuple[str, str, str | None, str | None]]:
    return [(c.type, c.status, c.reason, c.message) for c in job.conditions]


CREATED = ("Created", "True", "JobsCreationSucceeded", "Succeeded to create Jobs")
SUSPENDED = ("Suspended", "True", "Suspended", "TrainJob is suspended")
RESUMED = ("Suspended", "False", "Resumed", "TrainJob is resumed")
COMPLETE = ("Complete", "True", "AllJobsCompleted", "jobset completed successfully")


async def until(client: AsyncTrainHubClient, name: str, phase: JobPhase) -> TrainHubJob:
    for _ in range(400):
        job = await client.get_job(name)
        if job.phase == phase:
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never became {phase} (it is {job.phase})")


async def test_a_running_trainjob_is_suspended_and_resumed_with_trainers_conditions(
    client: AsyncTrainHubClient,
) -> None:
    await client.create_job(trainjob("tj", "sim-long"))
    running = await until(client, "tj", JobPhase.RUNNING)
    assert running.spec is not None
    assert running.spec["spec"]["managedBy"] == "trainhub.io/dispatcher"
    assert "runPolicy" not in running.spec["spec"]
    # No Running condition: upstream's TrainJob has none (the phase says it).
    assert conditions(running) == [CREATED]
    (node,) = running.status.jobsStatus or []
    assert (node.name, node.active, node.succeeded, node.suspended) == ("node", 1, 0, 0)

    await client.suspend_job("tj")
    suspended = await until(client, "tj", JobPhase.SUSPENDED)
    assert conditions(suspended) == [CREATED, SUSPENDED]
    assert suspended.status.replicaStatuses["node"].active == 0
    # Upstream's jobsStatus reaches the hub with the worker's status: the node Job suspended.
    assert [s.model_dump() for s in suspended.status.jobsStatus or []] == [
        {"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 1}
    ]
    assert await client.is_job_created("tj")

    await client.resume_job("tj")
    done = await client.wait_for_job_conditions("tj", expected_conditions={"Complete"}, timeout=30)
    assert done.phase == JobPhase.SUCCEEDED
    assert conditions(done) == [CREATED, RESUMED, COMPLETE]
    assert await client.is_job_succeeded("tj")  # the v1 kinds' word answers for Complete
    assert done.status.replicaStatuses["node"].succeeded == 2
    assert [s.model_dump() for s in done.status.jobsStatus or []] == [
        {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}
    ]


async def test_a_trainjob_submitted_suspended_is_held_until_resumed(
    client: AsyncTrainHubClient,
) -> None:
    await client.create_job(trainjob("held", "sim-short", suspend=True))
    held = await client.wait_for_job_conditions(
        "held", expected_conditions={"Suspended"}, timeout=20
    )
    assert held.phase == JobPhase.SUSPENDED and held.cluster is None
    assert held.message == "spec.suspend is true: held until resumed"
    assert conditions(held) == [CREATED, SUSPENDED]

    await client.resume_job("held")
    done = await client.wait_for_job_conditions("held", timeout=20)
    assert done.phase == JobPhase.SUCCEEDED
    assert conditions(done) == [CREATED, RESUMED, COMPLETE]
    # The hub resumed it by its own field: the spec it placed says suspend false.
    events = [e async for e in client.stream("held", follow=False)]
    told = [(e.update.phase, e.update.reason) for e in events]
    assert told[:4] == [
        (JobPhase.SUSPENDED, "Suspended"),
        (JobPhase.QUEUED, "Resumed"),
        (JobPhase.ASSIGNED, "Assigned"),
        (JobPhase.CREATED, "JobsCreationSucceeded"),  # the worker's news, not the hub's older
    ]
    assert told[-1] == (JobPhase.SUCCEEDED, "AllJobsCompleted")
    resumed = [e for e in events if e.update.reason == "Resumed"]
    assert len(resumed) == 1 and resumed[0].update.job is not None
    assert resumed[0].update.job["spec"]["suspend"] is False


async def test_an_update_of_spec_suspend_suspends_and_resumes_a_running_trainjob(
    system: Embedded, client: AsyncTrainHubClient
) -> None:
    document = trainjob("upd", "sim-long")
    await client.create_job(document)
    await until(client, "upd", JobPhase.RUNNING)
    override = {
        "targetJobs": [{"name": "node"}],
        "tolerations": [{"key": "x", "operator": "Exists"}],
    }
    # Suspending and changing podSpecOverrides in one update while its node pods are active:
    # refused in upstream's words, by the active counts of the worker's last status.
    suspend_and_change = copy.deepcopy(document)
    suspend_and_change["spec"] |= {"suspend": True, "podSpecOverrides": [override]}
    with pytest.raises(
        JobUpdateError,
        match="PodSpecOverrides cannot be modified when the JobSet's ReplicatedJob node is "
        "still active",
    ):
        await client.update_job(suspend_and_change)
    # Straight to the bus, past the SDK's check: the hub refuses it alike (dead letter).
    bus = system.bus
    assert isinstance(bus, MemoryBus)
    submitted = (await client.get_job("upd")).spec
    assert submitted is not None  # as the hub has it, with trainhub's manager filled in
    suspend_and_change["spec"]["managedBy"] = submitted["spec"]["managedBy"]
    await update_document(bus, system.topics, suspend_and_change)
    for _ in range(100):
        if bus.records(system.topics.dead_letters):
            break
        await asyncio.sleep(0.05)
    reasons = [dead_letter_reason(r) or "" for r in bus.records(system.topics.dead_letters)]
    assert len(reasons) == 1 and "ReplicatedJob node is still active" in reasons[0]
    changed = copy.deepcopy(document)
    changed["spec"]["suspend"] = True
    await client.update_job(changed)
    suspended = await until(client, "upd", JobPhase.SUSPENDED)
    assert conditions(suspended)[-1] == SUSPENDED
    # Suspended, its pods are gone: its trainer and podSpecOverrides may change (the hub
    # places it again with the new spec when it is resumed), as upstream's may while it stays
    # suspended; its runtimeRef never (upstream's CRD: "runtimeRef is immutable").
    other_runtime = copy.deepcopy(changed)
    other_runtime["spec"]["runtimeRef"] = {"name": "sim-short"}
    with pytest.raises(
        JobUpdateError, match=r"spec\.runtimeRef: Invalid value: runtimeRef is immutable"
    ):
        await client.update_job(other_runtime)
    changed["spec"]["podSpecOverrides"] = [override]
    changed["spec"]["trainer"]["numNodes"] = 1
    resumed_with_change = copy.deepcopy(changed)
    resumed_with_change["spec"]["suspend"] = False
    with pytest.raises(JobUpdateError, match="PodSpecOverrides can only be modified when the"):
        await client.update_job(resumed_with_change)
    await client.update_job(changed)  # still suspended: accepted
    changed["spec"]["suspend"] = False
    await client.update_job(changed)
    done = await client.wait_for_job_conditions("upd", timeout=30)
    assert done.phase == JobPhase.SUCCEEDED
    assert conditions(done)[-1] == COMPLETE
    assert done.spec is not None and done.spec["spec"]["podSpecOverrides"] == [override]
    assert done.status.replicaStatuses["node"].succeeded == 1


async def test_a_failed_trainjob_has_trainers_failed_condition(
    client: AsyncTrainHubClient,
) -> None:
    await client.create_job(trainjob("crash", "sim-crash"))
    failed = await client.wait_for_job_conditions(
        "crash", expected_conditions={"Failed"}, timeout=20
    )
    assert failed.phase == JobPhase.FAILED
    last = failed.conditions[-1]
    assert (last.type, last.status, last.reason) == ("Failed", "True", "FailedJobs")
    assert (last.message or "").startswith("jobset failed due to one or more job failures: ")
    assert "crash-node-0-" in (last.message or "") and "code 3" in (last.message or "")
    assert [c.type for c in failed.conditions] == ["Created", "Failed"]


def test_submit_gives_a_trainjob_trainhubs_manager_in_its_own_field() -> None:
    document = trainjob("cli", "torch-distributed")
    assert managers([document], default_managed_by=True) == []
    assert document["spec"]["managedBy"] == "trainhub.io/dispatcher"
    assert "runPolicy" not in document["spec"]
    unmanaged = trainjob("cli", "torch-distributed")
    (warning,) = managers([unmanaged], default_managed_by=False)
    assert "spec.managedBy is unset (trainer.kubeflow.org/trainjob-controller)" in warning


async def test_get_and_describe_show_a_trainjob_as_trainer_would(
    client: AsyncTrainHubClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await client.create_job(trainjob("shown", "sim-short", suspend=True))
    await client.wait_for_job_conditions("shown", expected_conditions={"Suspended"}, timeout=20)
    await client.resume_job("shown")
    job = await client.wait_for_job_conditions(
        "shown", expected_conditions={"Complete"}, timeout=20
    )

    item = job_item(job)  # `get job shown -o yaml|json`
    assert item["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and item["kind"] == "TrainJob"
    assert item["metadata"]["uid"] == job.uid and item["spec"]["runtimeRef"]["name"] == "sim-short"
    # Upstream's metav1.Condition fields, in Trainer's words; no Running condition.
    assert [
        (c["type"], c["status"], c["reason"], c["message"], sorted(c))
        for c in item["status"]["conditions"]
    ] == [
        (*CREATED, ["lastTransitionTime", "message", "reason", "status", "type"]),
        (*RESUMED, ["lastTransitionTime", "message", "reason", "status", "type"]),
        (*COMPLETE, ["lastTransitionTime", "message", "reason", "status", "type"]),
    ]
    assert item["status"]["jobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}
    ]
    assert item["status"]["trainhub"]["phase"] == "Succeeded"
    assert item["status"]["trainhub"]["replicaStatuses"]["node"]["succeeded"] == 2
    assert resource_name(job) == "trainjob.trainer.kubeflow.org/shown"

    recorded = Console(width=250, record=True)
    monkeypatch.setattr(cli_get_jobs, "console", recorded)
    monkeypatch.setattr(cli_jobs, "console", recorded)
    print_jobs([job], GetOutput.wide, one=False)  # `get trainjobs -o wide`
    (row,) = [line for line in recorded.export_text().splitlines() if "shown" in line]
    assert row.split()[:5] == ["default", "shown", "TrainJob", "default", "Succeeded"]
    assert "Complete" in row.split() and "AllJobsCompleted" in row.split()

    describe_text(job)  # `describe job shown`
    text = recorded.export_text()
    fields = {
        key.strip(): value.strip()
        for key, _, value in (line.partition(":") for line in text.splitlines())
    }
    assert fields["Runtime"] == "ClusterTrainingRuntime sim-short (plain), numNodes=2"
    assert fields["Spec"] == "suspend=False, managedBy=trainhub.io/dispatcher"
    conditions_rows = [line.split("│")[1:4] for line in text.splitlines() if "│ " in line]
    shown = [tuple(cell.strip() for cell in row) for row in conditions_rows]
    assert ("Suspended", "False", "Resumed") in shown
    assert ("Complete", "True", "AllJobsCompleted") in shown
    jobs_rows = [line.split("│")[1:7] for line in text.split("jobs status")[1].splitlines()]
    assert ["node", "0", "1", "0", "0", "0"] in [[c.strip() for c in r] for r in jobs_rows]
