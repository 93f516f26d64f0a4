"""Pods that local and sim backends create again under a name wait as a kubelet's would."""

from __future__ import annotations

import asyncio

from schemas.job_parsing import parse_job
from tests.helpers import jax_job
from workers.backends.crash_backoff import CAP, RESET_AFTER, CrashBackoff
from workers.backends.sim import SimBackend
from workers.cluster_spec import parse_cluster_spec
from workers.rendering import render_job


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_run_and_restart_are_immediate_then_the_wait_doubles_to_a_cap() -> None:
    clock = Clock()
    backoff = CrashBackoff(initial=1.0, cap=CAP, clock=clock)
    waits = [backoff.delay("ns/p") for _ in range(9)]
    assert waits == [0.0, 0.0, 1.0, 2.0, 4.0, 8.0, 16.0, CAP, CAP]
    assert backoff.delay("ns/other") == 0.0  # per pod


def test_a_long_run_or_a_new_job_starts_the_count_again() -> None:
    clock = Clock()
    backoff = CrashBackoff(clock=clock)
    for _ in range(4):
        backoff.delay("ns/p")
    clock.now += RESET_AFTER
    assert backoff.delay("ns/p") == 0.0  # it ran long enough: a fresh start
    assert backoff.delay("ns/p") == 0.0
    assert backoff.delay("ns/p") > 0
    backoff.forget("ns/p")
    assert backoff.delay("ns/p") == 0.0


async def test_a_sim_pod_created_again_and_again_waits_on_its_node() -> None:
    backend = SimBackend(parse_cluster_spec("a:cpu=4,memory=8Gi").pool())
    job = parse_job(jax_job("crash", workers=1, duration="10s"))
    (pod,) = render_job(job).pods

    async def phases_within(seconds: float) -> list[str]:
        seen: list[str] = []
        with_deadline = asyncio.get_running_loop().time() + seconds
        while (left := with_deadline - asyncio.get_running_loop().time()) > 0:
            try:
                obs = await asyncio.wait_for(backend.observations.get(), left)
            except TimeoutError:
                break
            seen.append(obs.phase)
        return seen

    try:
        for _ in range(2):  # the first run and the first restart: at once
            await backend.create_pod(job.uid, pod)
            assert await phases_within(0.3) == ["Pending", "Running"]
            await backend.delete_pod(job.uid, pod.name, pod.namespace)
        await backend.create_pod(job.uid, pod)
        assert await phases_within(0.6) == ["Pending"]  # the second restart waits 1 s
        assert await phases_within(1.0) == ["Running"]
        await backend.delete_job(job.uid)
        await backend.create_pod(job.uid, pod)  # a new run of the job: no wait
        assert await phases_within(0.3) == ["Pending", "Running"]
    finally:
        await backend.close()
