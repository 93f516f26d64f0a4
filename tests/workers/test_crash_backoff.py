"""Pods that local and sim backends create again under a name wait as a kubelet's would."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from schemas.job_parsing import parse_job
from tests.helpers import jax_job
from workers.backends.crash_backoff import CAP, RESET_AFTER, CrashBackoff
from workers.backends.local import CannotRunLocally, LocalBackend
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


async def test_a_local_pod_that_cannot_start_fails_after_the_backoff_too(tmp_path: Path) -> None:
    """A command that is not there: the pod fails before any process runs. Re-created under
    OnFailure, it must wait as a crashing one does, or the worker loops on it with a core
    busy."""
    pool = parse_cluster_spec("a:cpu=4,memory=8Gi").pool()
    backend = LocalBackend(pool, workdir=tmp_path, logs_dir=tmp_path / "logs")
    job = parse_job(jax_job("missing", workers=1))
    (pod,) = render_job(job).pods
    container = pod.spec.containers[0].model_copy(
        update={"command": [str(tmp_path / "no-such-program")], "args": None}
    )
    pod = replace(pod, spec=pod.spec.model_copy(update={"containers": [container]}))
    loop = asyncio.get_running_loop()
    await backend.start()
    try:
        for _ in range(2):  # the first run and the first restart fail at once
            await backend.create_pod(job.uid, pod)
            observed = await asyncio.wait_for(backend.observations.get(), 1)
            assert (observed.phase, observed.exit_code) == ("Failed", 127)
            assert "cannot start" in (observed.message or "")
            await backend.delete_pod(job.uid, pod.name, pod.namespace)
        started = loop.time()
        await backend.create_pod(job.uid, pod)  # the second restart waits 1 s
        assert (await asyncio.wait_for(backend.observations.get(), 1)).phase == "Pending"
        observed = await asyncio.wait_for(backend.observations.get(), 3)
        assert observed.phase == "Failed" and loop.time() - started >= 0.9
    finally:
        await backend.close()


async def test_a_local_pod_without_a_command_is_refused_for_good(tmp_path: Path) -> None:
    """No command (Kubeflow's examples rely on the image's entrypoint, which a process
    cannot know): refused at once, which fails the job, rather than restarted for ever."""
    pool = parse_cluster_spec("a:cpu=4,memory=8Gi").pool()
    backend = LocalBackend(pool, workdir=tmp_path, logs_dir=tmp_path / "logs")
    job = parse_job(jax_job("no-command", workers=1))
    (pod,) = render_job(job).pods
    container = pod.spec.containers[0].model_copy(update={"command": None, "args": None})
    pod = replace(pod, spec=pod.spec.model_copy(update={"containers": [container]}))
    try:
        with pytest.raises(CannotRunLocally, match="container 'jax' has no command") as refused:
            await backend.create_pod(job.uid, pod)
        assert not refused.value.transient
        assert await backend.job_pod_names(job.uid) == []
    finally:
        await backend.close()
