"""The sim backend schedules as kube-scheduler does with host ports: one holder per node."""

from __future__ import annotations

import asyncio

from schemas.job_parsing import parse_job
from tests.helpers import jax_job, on_host_network
from workers.backends.base import PodObservation
from workers.backends.sim import SimBackend
from workers.cluster_spec import parse_cluster_spec
from workers.rendering import render_job


async def test_pods_holding_one_host_port_take_a_node_each() -> None:
    backend = SimBackend(parse_cluster_spec("sim:cpu=8,memory=16Gi,nodes=2").pool())
    await backend.start()
    try:
        rendered = render_job(
            parse_job(on_host_network(jax_job("hosted", workers=3, duration="30s")))
        )
        for pod in rendered.pods:
            await backend.create_pod(rendered.job.uid, pod)
        seen: dict[str, PodObservation] = {}
        while len({n for n, o in seen.items() if o.phase == "Running"}) < 2 or len(seen) < 3:
            observed = await asyncio.wait_for(backend.observations.get(), 10)
            seen[observed.name] = observed
        running = [o for o in seen.values() if o.phase == "Running"]
        assert len({o.node for o in running}) == 2  # one to a node though 8 cpu fit all three
        waiting = seen["hosted-worker-2"]
        assert waiting.phase == "Pending"
        assert "2 node(s) didn't have free ports for the requested pod ports" in (
            waiting.message or ""
        )
        capacity = await backend.capacity()
        assert [n.hostPorts for n in capacity.nodes] == [["TCP/6666"], ["TCP/6666"]]
        # The first pod gone, its port is free again and the third pod is placed there.
        await backend.delete_pod(rendered.job.uid, "hosted-worker-0", "default")
        while seen["hosted-worker-2"].phase != "Running":
            observed = await asyncio.wait_for(backend.observations.get(), 10)
            seen[observed.name] = observed
    finally:
        await backend.close()
