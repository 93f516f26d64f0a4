"""The async SDK against the embedded runner (in-memory bus): job state from the status
topic, waiting, control requests, the status stream and logs through the worker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bus.base import BusError
from schemas.status import JobPhase
from tests.helpers import jax_job
from trainhub import (
    AsyncTrainHubClient,
    JobExistsError,
    JobFailedError,
    JobNotFoundError,
    JobTimeoutError,
    LogsUnavailableError,
)
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.producer import submit_document
from trainhub.settings import TrainhubSettings
from workers.cluster_spec import parse_cluster_spec

ROOT = Path(__file__).resolve().parents[2]


def _options(backend: str, tmp_path: Path) -> EmbeddedOptions:
    return EmbeddedOptions(
        clusters=[parse_cluster_spec("solo:cpu=4,memory=8Gi")],
        backend=backend,
        heartbeat_interval=0.2,
        logs_dir=tmp_path,
        workdir=ROOT,
    )


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[AsyncTrainHubClient]:
    async with Embedded(_options("sim", tmp_path)) as system:
        async with AsyncTrainHubClient(settings=TrainhubSettings(), bus=system.bus) as client:
            yield client


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[AsyncTrainHubClient]:
    async with Embedded(_options("local", tmp_path)) as system:
        async with AsyncTrainHubClient(settings=TrainhubSettings(), bus=system.bus) as client:
            yield client


async def test_job_state_waiting_and_listing(sim: AsyncTrainHubClient) -> None:
    client = sim
    uid = await client.create_job(jax_job("one", duration="0.3s"), queue="research")
    assert (await client.get_job("one")).uid == uid
    seen: list[JobPhase | None] = []
    job = await client.wait_for_job_conditions(
        "one", timeout=20, callback=lambda j: seen.append(j.phase)
    )
    assert job.phase == JobPhase.SUCCEEDED and job.cluster == "solo"
    assert job.queue == "research" and job.kind == "JAXJob"
    assert job.placement is not None and job.placement.chosen == "solo"
    assert seen[-1] == JobPhase.SUCCEEDED
    conditions = {c.type: c.status for c in await client.get_job_conditions("default/one")}
    assert conditions == {"Created": "True", "Running": "False", "Succeeded": "True"}
    assert await client.is_job_created("one") and await client.is_job_succeeded(uid)
    assert not await client.is_job_running("one") and not await client.is_job_failed("one")
    assert not await client.is_job_restarting("one")
    assert [j.name for j in await client.list_jobs(queue="research")] == ["one"]
    assert await client.list_jobs(queue="default") == []
    assert await client.list_jobs(namespace="other") == []
    phases = [e.phase for e in job.events]
    assert phases[0] == JobPhase.QUEUED and phases[-1] == JobPhase.SUCCEEDED
    with pytest.raises(JobExistsError, match="already exists"):
        await client.create_job(jax_job("one"))
    with pytest.raises(JobNotFoundError):
        await client.get_job("nope")
    await client.delete_job("one")
    await _until(client, "one", JobPhase.DELETED)
    with pytest.raises(JobFailedError, match="Deleted"):
        await client.wait_for_job_conditions("one", timeout=10)
    assert not await client.is_job_succeeded("one")
    assert await client.list_jobs() == []


async def test_a_corrected_job_may_take_the_name_of_an_invalid_one(
    sim: AsyncTrainHubClient,
) -> None:
    client = sim
    broken = jax_job("typo")
    broken["spec"]["runPolicyy"] = {}  # another producer, one that does not validate
    bus, _ = await client._connected()
    await submit_document(bus, client.topics, broken)
    await _until(client, "typo", JobPhase.REJECTED)
    assert (await client.get_job("typo")).reason == "Invalid"
    await client.create_job(jax_job("typo", duration="0.2s"))
    job = await client.wait_for_job_conditions("typo", timeout=20)
    assert job.phase == JobPhase.SUCCEEDED


async def _until(client: AsyncTrainHubClient, name: str, phase: JobPhase) -> None:
    for _ in range(200):
        if (await client.get_job(name)).phase == phase:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never became {phase}")


async def test_failure_timeout_suspend_and_resume(
    sim: AsyncTrainHubClient,
) -> None:
    client = sim
    await client.create_job(jax_job("bad", exit_code="3"))
    with pytest.raises(JobFailedError, match="Failed") as failed:
        await client.wait_for_job_conditions("bad", timeout=20)
    assert failed.value.job.phase == JobPhase.FAILED
    assert await client.is_job_failed("bad")
    # Failed is what this caller waits for: no error then.
    job = await client.wait_for_job_conditions("bad", expected_conditions={"Failed"}, timeout=5)
    assert job.phase == JobPhase.FAILED

    await client.create_job(jax_job("long", duration="30s"))
    await client.wait_for_job_conditions("long", expected_conditions={"Running"}, timeout=20)
    started = time.monotonic()
    with pytest.raises(TimeoutError) as timed_out:
        await client.wait_for_job_conditions("long", timeout=0.5)
    assert isinstance(timed_out.value, JobTimeoutError)
    assert time.monotonic() - started < 3
    await client.suspend_job("long")
    await client.wait_for_job_conditions("long", expected_conditions={"Suspended"}, timeout=20)
    assert (await client.get_job("long")).phase == JobPhase.SUSPENDED
    with pytest.raises(LogsUnavailableError, match="pods are deleted until it is resumed"):
        await client.get_job_logs("long")
    await client.resume_job("long")
    await client.wait_for_job_conditions("long", expected_conditions={"Running"}, timeout=20)
    with pytest.raises(ValueError, match="expected_conditions"):
        await client.wait_for_job_conditions("long", expected_conditions={"Done"})
    with pytest.raises(ValueError, match="timeout: seconds to wait"):
        await client.wait_for_job_conditions("long", timeout=-1)


def test_a_client_for_a_namespace_that_cannot_exist_is_refused() -> None:
    for bad in ("Bad_NS", "", "x" * 64):
        with pytest.raises(ValueError, match=r"namespace: .* is not a DNS-1123 label"):
            AsyncTrainHubClient(bootstrap="127.0.0.1:1", namespace=bad)
    assert AsyncTrainHubClient(bootstrap="127.0.0.1:1", namespace="team-a").namespace == "team-a"


async def test_stream_resumes_exactly_after_the_positions_kept(
    sim: AsyncTrainHubClient,
) -> None:
    client = sim
    for name in ("s-a", "s-b"):
        await client.create_job(jax_job(name, duration="0.2s"), queue="pipeline")
    await client.create_job(jax_job("other", duration="0.2s"))
    for name in ("s-a", "s-b", "other"):
        await client.wait_for_job_conditions(name, timeout=20)
    every = [e async for e in client.stream(queue="pipeline", follow=False)]
    assert {e.update.name for e in every} == {"s-a", "s-b"}
    assert sum(e.phase == JobPhase.SUCCEEDED for e in every) == 2
    # A pipeline that handled the first four events and kept their positions, as JSON does.
    positions: dict[str, int] = {}
    for event in every[:4]:
        positions[str(event.partition)] = event.offset
    rest = [e async for e in client.stream(queue="pipeline", from_offset=positions, follow=False)]
    handled = {e.position for e in every[:4]}
    assert {e.position for e in rest} == {e.position for e in every} - handled
    assert len(rest) == len(every) - 4
    one = [e async for e in client.stream("s-b", follow=False)]
    assert {e.update.name for e in one if not e.from_worker} == {"s-b"}
    assert len({e.uid for e in one}) == 1 and one[-1].phase == JobPhase.SUCCEEDED
    after = max(e.time for e in every)
    late = [e async for e in client.stream(from_time=after.timestamp() + 1, follow=False)]
    assert late == []


async def _names_and_text(chunks: AsyncIterator[Any]) -> list[tuple[str, str]]:
    return [(c.pod, c.text) async for c in chunks]


def printer(lines: int, pause: float = 0.0, fail: bool = False) -> None:
    import time

    for i in range(lines):
        print(f"line {i}")
        time.sleep(pause)
    if fail:
        raise SystemExit(7)


async def test_logs_come_from_the_worker_running_the_job(
    local: AsyncTrainHubClient,
) -> None:
    client = local
    await client.create_job(
        train_func=printer,
        name="talk",
        parameters={"lines": 5},
        resources_per_worker={"cpu": "500m", "memory": "128Mi"},
    )
    await client.wait_for_job_conditions("talk", timeout=60)
    logs = await client.get_job_logs("talk")
    assert logs == {"talk-master-0": "".join(f"line {i}\n" for i in range(5))}
    assert await client.get_job_logs("talk", tail_lines=2) == {"talk-master-0": "line 3\nline 4\n"}
    with pytest.raises(LogsUnavailableError, match="no pod"):
        await client.get_job_logs("talk", pod="talk-worker-7")

    # Followed from before it runs: every line once, in order, and the stream ends with it.
    await client.create_job(
        train_func=printer,
        name="slow",
        parameters={"lines": 6, "pause": 0.3, "fail": True},
        backoff_limit=0,
    )
    chunks = await asyncio.wait_for(_names_and_text(client.stream_job_logs("slow", timeout=60)), 60)
    assert len(chunks) >= 2, "new text must arrive while the job runs"
    assert {pod for pod, _ in chunks} == {"slow-master-0"}
    assert "".join(text for _, text in chunks) == "".join(f"line {i}\n" for i in range(6))
    assert await client.is_job_failed("slow")


async def test_logs_of_a_job_not_placed_are_unavailable(
    sim: AsyncTrainHubClient,
) -> None:
    client = sim
    held = jax_job("held")
    held["spec"]["runPolicy"]["suspend"] = True
    await client.create_job(held)
    await client.wait_for_job_conditions("held", expected_conditions={"Suspended"}, timeout=10)
    with pytest.raises(LogsUnavailableError, match="runs on no cluster"):
        await client.get_job_logs("held")


async def test_a_job_deleted_by_its_ttl_keeps_its_outcome_and_frees_its_name(
    sim: AsyncTrainHubClient,
) -> None:
    """Waiting on a job whose ttlSecondsAfterFinished already ran out still tells how it
    ended (a deletion by its owner does not); its name can be used again."""
    client = sim
    document = jax_job("brief", duration="0.1s")
    document["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 0
    await client.create_job(document)
    await _until(client, "brief", JobPhase.DELETED)
    job = await client.wait_for_job_conditions("brief", timeout=10)
    assert job.phase == JobPhase.DELETED and job.reason == "TTLExpired"
    assert await client.is_job_succeeded("brief") and not await client.is_job_failed("brief")
    assert await client.list_jobs() == []
    failing = jax_job("broken", duration="0.1s", exit_code="1")
    failing["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 0
    await client.create_job(failing)
    await _until(client, "broken", JobPhase.DELETED)
    with pytest.raises(JobFailedError, match="broken is Deleted"):
        await client.wait_for_job_conditions("broken", timeout=10)
    await client.create_job(document)
    job = await client.wait_for_job_conditions("brief", timeout=20)
    assert job.phase in (JobPhase.SUCCEEDED, JobPhase.DELETED) and job.attempt == 2


async def test_a_job_held_suspended_by_the_hub_has_upstreams_conditions(
    sim: AsyncTrainHubClient,
) -> None:
    # Upstream's operator marks a job created, then suspended, before any pod exists; a
    # client waiting for either must see it while the hub holds the job.
    document = jax_job("held", duration="0.2s")
    document["spec"]["runPolicy"]["suspend"] = True
    client = sim
    await client.create_job(document)
    await client.wait_for_job_conditions("held", expected_conditions={"Suspended"}, timeout=20)
    assert await client.is_job_created("held")
    found = [(c.type, c.status, c.reason) for c in await client.get_job_conditions("held")]
    assert found == [("Created", "True", "JAXJobCreated"), ("Suspended", "True", "JAXJobSuspended")]
    assert (await client.get_job_conditions("held"))[-1].message == "JAXJob held is suspended."
    await client.resume_job("held")
    await client.wait_for_job_conditions("held", timeout=20)
    # The worker's conditions add to the hub's: the history stays, as on upstream's object.
    final = {c.type: (c.status, c.reason) for c in await client.get_job_conditions("held")}
    assert final["Suspended"] == ("False", "JAXJobResumed")
    assert final["Succeeded"] == ("True", "JAXJobSucceeded")
    resumed = [e async for e in client.stream("held", follow=False) if e.update.reason == "Resumed"]
    assert len(resumed) == 1 and resumed[0].update.status is not None
    assert [(c.type, c.status, c.reason) for c in resumed[0].update.status.conditions] == [
        ("Created", "True", "JAXJobCreated"),
        ("Suspended", "False", "JAXJobResumed"),
    ]


async def test_the_clients_namespace_and_waits_as_upstreams(tmp_path: Path) -> None:
    async with Embedded(_options("sim", tmp_path)) as system:
        settings = TrainhubSettings()
        async with AsyncTrainHubClient(settings=settings, bus=system.bus, namespace="team-b") as c:
            document = jax_job("nsdoc", duration="0.2s")
            del document["metadata"]["namespace"]
            await c.create_job(document)  # no namespace of its own: the client's
            job = await c.wait_for_job_conditions("nsdoc", expected_conditions="Succeeded")
            assert job.key == "team-b/nsdoc"
            # Waiting for Running on a job that succeeded is no failure: it times out.
            with pytest.raises(JobTimeoutError):
                await c.wait_for_job_conditions(
                    "nsdoc", expected_conditions={"Restarting"}, timeout=0.5
                )
        # A client left open when the bus closes must not freeze the program.
        client = AsyncTrainHubClient(settings=settings, bus=system.bus)
        await client.list_jobs()
    async with asyncio.timeout(10):
        with pytest.raises(BusError):
            await client.list_jobs()
        await client.close()


async def test_log_filters_pick_pods_as_get_job_pods_does(sim: AsyncTrainHubClient) -> None:
    client = sim
    await client.create_job(jax_job("picky", workers=3, duration="0.2s"))
    await client.wait_for_job_conditions("picky", timeout=20)
    every = await client.get_job_logs("picky")
    assert set(every) == {"picky-worker-0", "picky-worker-1", "picky-worker-2"}
    assert set(await client.get_job_logs("picky", replica_index=1)) == {"picky-worker-1"}
    assert set(await client.get_job_logs("picky", is_master=True)) == {"picky-worker-0"}
    assert set(await client.get_job_logs("picky", replica_type="worker")) == set(every)
    with pytest.raises(ValueError, match="tail_lines must be 0 or more"):
        await client.get_job_logs("picky", tail_lines=-1)
    with pytest.raises(ValueError, match="replica_type 'bogus' is none of the Kubeflow"):
        await client.get_job_pod_names("picky", replica_type="bogus")
    assert await client.get_job_pod_names("picky", replica_type="Chief") == []  # some kind's
    with pytest.raises(ValueError, match="replica_index: a replica's index"):
        await client.get_job_logs("picky", replica_index=-1)


async def test_wrong_argument_types_are_value_errors(sim: AsyncTrainHubClient) -> None:
    # Not AttributeErrors or TypeErrors from inside the client.
    client = sim
    for name in (None, 5, ""):
        with pytest.raises(ValueError, match="name: a job's name"):
            await client.get_job(name)  # type: ignore[arg-type]
    for job in ([1, 2], 5):
        with pytest.raises(ValueError, match="job: a job document"):
            await client.create_job(job)  # type: ignore[arg-type]
    odd = jax_job("odd", workers=1)
    odd["spec"]["runPolicy"]["schedulingPolicy"] = "x"
    with pytest.raises(ValueError, match="schedulingPolicy: expected a mapping"):
        await client.create_job(odd, queue="q")
    await client.create_job(jax_job("waited", workers=1, duration="0.1s"))
    with pytest.raises(ValueError, match="expected_conditions must be some of"):
        await client.wait_for_job_conditions("waited", expected_conditions=None)  # type: ignore[arg-type]
    for timeout in (None, float("nan")):
        with pytest.raises(ValueError, match="timeout: seconds to wait"):
            await client.wait_for_job_conditions("waited", timeout=timeout)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="replica_type 1 is none"):
        await client.get_job_pods("waited", replica_type=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tail_lines must be 0 or more lines"):
        await client.get_job_logs("waited", tail_lines="5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window: seconds"):
        await client.list_clusters(window="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="from_time: a datetime"):
        await anext(client.stream(from_time="2020-01-01"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="from_offset: partition -> offset"):
        await anext(client.stream(from_offset={"x": "y"}))  # type: ignore[arg-type]


def test_sdk_errors_are_what_upstreams_callers_catch() -> None:
    from trainhub import JobExistsError, LogsUnavailableError

    for error in (JobFailedError, JobNotFoundError, JobExistsError, LogsUnavailableError):
        assert issubclass(error, RuntimeError), error
    assert issubclass(JobTimeoutError, TimeoutError) and issubclass(JobTimeoutError, RuntimeError)
