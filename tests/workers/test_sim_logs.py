"""The sim backend's pod "output" only grows, as a container's does: a follower reading on
from where it stopped gets whole new lines, never a piece of a rewritten one."""

from __future__ import annotations

import asyncio

from schemas.job_parsing import parse_job
from tests.helpers import jax_job
from workers.backends.base import PodPhase
from workers.backends.sim import SimBackend
from workers.cluster_spec import parse_cluster_spec
from workers.rendering import render_job


async def test_a_sim_pods_log_is_appended_to() -> None:
    backend = SimBackend(parse_cluster_spec("sim:cpu=4,memory=8Gi").pool())
    await backend.start()
    try:
        job = render_job(parse_job(jax_job("talk", workers=1, duration="0.3s", exit_code="2")))
        pod = job.pods[0]
        await backend.create_pod(job.job.uid, pod)
        phases: list[PodPhase] = []
        while not phases or phases[-1] != "Failed":
            observed = await asyncio.wait_for(backend.observations.get(), 10)
            phases.append(observed.phase)
            if observed.phase == "Running":
                running = await backend.pod_logs(job.job.uid, pod.name)
        final = await backend.pod_logs(job.job.uid, pod.name)
        assert running == "[sim] talk-worker-0 is Running\n"
        assert final == running + "[sim] talk-worker-0 is Failed (exit code 2)\n"
    finally:
        await backend.close()
