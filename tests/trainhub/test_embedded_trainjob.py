"""A TrainJob through the whole flow on the sim backend: placed by the same gang fit, run
by its runtime's replicated jobs, Succeeded; one naming an unknown runtime is Rejected."""

from __future__ import annotations

from typing import Any

from schemas.status import JobPhase
from trainhub.embedded import Embedded, EmbeddedOptions
from workers.cluster_spec import parse_cluster_spec


def trainjob(name: str, runtime: str, nodes: int, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": runtime},
            "managedBy": "trainhub.io/dispatcher",
            "trainer": {
                "numNodes": nodes,
                "resourcesPerNode": {"requests": {"cpu": cpu, "memory": "1Gi"}},
            },
        },
    }


async def test_trainjob_runs_to_succeeded_on_the_cluster_its_nodes_fit() -> None:
    options = EmbeddedOptions(
        clusters=[
            parse_cluster_spec("small:cpu=2,memory=8Gi"),
            parse_cluster_spec("big:cpu=4,memory=8Gi,nodes=2"),
        ],
        backend="sim",
        heartbeat_interval=0.2,
    )
    async with Embedded(options) as system:
        # Two nodes of 3 CPUs each: only `big` has two nodes that fit one each.
        uid = await system.submit(trainjob("torch", "torch-distributed", nodes=2, cpu="3"))
        unknown = await system.submit(trainjob("nope", "no-such-runtime", nodes=1, cpu="1"))
        final = await system.wait_finished([uid, unknown], timeout=30)
    assert final[uid].phase == JobPhase.SUCCEEDED
    assert final[uid].cluster == "big"
    status = final[uid].status
    assert status is not None and status.replicaStatuses["node"].succeeded == 2
    assert final[unknown].phase == JobPhase.REJECTED
    known = (
        "known runtimes: mpi-distributed, plain-distributed, torch-distributed, "
        "torchtune-llama3.2-1b, torchtune-llama3.2-3b (got"
    )
    assert known in (final[unknown].message or "")
