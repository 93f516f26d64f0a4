"""Record the live view of a real embedded run (hub, three `sim` clusters, a mix of jobs) as
the SVG image the README shows: `python -m trainhub.cli_live_demo docs/live-view.svg`."""

from __future__ import annotations

import asyncio
import io
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from schemas.events import JobStatusUpdate
from schemas.status import JobPhase
from trainhub.cli_live import LiveState, follow_heartbeats, render_live
from trainhub.embedded import Embedded, EmbeddedOptions
from workers.cluster_spec import parse_cluster_spec

CLUSTERS = [
    "east:cpu=8,memory=32Gi,nodes=2",
    "west:cpu=16,memory=64Gi,nodes=2,gpu=4",
    "edge:cpu=4,memory=8Gi",
]
_SPECS = {
    "PyTorchJob": ("pytorchReplicaSpecs", "pytorch"),
    "TFJob": ("tfReplicaSpecs", "tensorflow"),
    "JAXJob": ("jaxReplicaSpecs", "jax"),
    "XGBoostJob": ("xgbReplicaSpecs", "xgboost"),
}


def demo_job(
    name: str,
    kind: str,
    replicas: dict[str, int],
    *,
    cpu: str,
    memory: str,
    duration: str,
    gpu: int = 0,
    exit_code: int = 0,
) -> dict[str, Any]:
    """A job for the `sim` backend: its pods run for `duration`, then exit with `exit_code`."""
    key, container = _SPECS[kind]
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    resources: dict[str, Any] = {"requests": requests}
    if gpu:
        requests["nvidia.com/gpu"] = gpu
        resources["limits"] = {"nvidia.com/gpu": gpu}  # extended resources: limit = request
    annotations = {
        "trainhub.io/sim-duration": duration,
        "trainhub.io/sim-exit-code": str(exit_code),
    }
    template = {
        "metadata": {"annotations": annotations},
        "spec": {
            "containers": [
                {
                    "name": container,
                    "image": f"example/{name}:1",
                    "command": ["python", "train.py"],
                    "resources": resources,
                }
            ]
        },
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "runPolicy": {"managedBy": "trainhub.io/dispatcher", "backoffLimit": 0},
            key: {
                rtype: {"replicas": count, "restartPolicy": "Never", "template": template}
                for rtype, count in replicas.items()
            },
        },
    }


JOBS = [
    demo_job("mnist", "JAXJob", {"Worker": 2}, cpu="1", memory="2Gi", duration="1s"),
    demo_job(
        "resnet",
        "PyTorchJob",
        {"Master": 1, "Worker": 3},
        cpu="3",
        memory="8Gi",
        duration="12s",
    ),
    demo_job(
        "bert", "TFJob", {"Chief": 1, "Worker": 3}, cpu="2", memory="8Gi", gpu=1, duration="12s"
    ),
    demo_job(
        "iris", "XGBoostJob", {"Master": 1, "Worker": 1}, cpu="1", memory="1Gi", duration="1s"
    ),
    demo_job(
        "flaky", "PyTorchJob", {"Master": 1}, cpu="1", memory="1Gi", duration="1s", exit_code=3
    ),
    demo_job(
        "llama", "PyTorchJob", {"Master": 1, "Worker": 1}, cpu="7", memory="24Gi", duration="2s"
    ),
    demo_job(
        "gpt",
        "PyTorchJob",
        {"Master": 1, "Worker": 1},
        cpu="4",
        memory="16Gi",
        gpu=4,
        duration="2s",
    ),
]


async def record(path: Path, *, width: int = 116) -> LiveState:
    """Run the demo jobs; save the view as it stands once three jobs finished while others
    still run (or at the end, should that moment never come)."""
    options = EmbeddedOptions(
        clusters=[parse_cluster_spec(c) for c in CLUSTERS],
        backend="sim",
        heartbeat_interval=0.2,
    )
    title = f"trainhub up --backend sim: hub + {len(CLUSTERS)} clusters, {len(JOBS)} jobs"
    state = LiveState(title=title, max_heartbeat_age=options.max_heartbeat_age)
    saved = False

    def save() -> None:
        nonlocal saved
        console = Console(
            record=True,
            width=width,
            file=io.StringIO(),
            force_terminal=True,
            color_system="truecolor",
        )
        console.print(render_live(state))
        path.parent.mkdir(parents=True, exist_ok=True)
        console.save_svg(str(path), title="trainhub up")
        saved = True

    def on_update(update: JobStatusUpdate) -> None:
        state.apply(update, datetime.now(UTC))
        running = any(j.phase == JobPhase.RUNNING for j in state.jobs.values())
        if not saved and state.finished >= 3 and running:
            save()

    async with Embedded(options) as system:
        heartbeats = asyncio.create_task(
            follow_heartbeats(system.bus, system.topics, state.heartbeat, state.retire)
        )
        try:
            uids = []
            for document in JOBS:
                uid = await system.submit(document)
                state.expect(uid, document, datetime.now(UTC))
                uids.append(uid)
            await system.wait_finished(uids, on_update, timeout=120)
        finally:
            heartbeats.cancel()
            await asyncio.gather(heartbeats, return_exceptions=True)
    if not saved:
        save()
    return state


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python -m trainhub.cli_live_demo OUTPUT.svg")
    state = asyncio.run(record(Path(sys.argv[1])))
    print(f"{sys.argv[1]}: {state.succeeded}/{len(state.jobs)} jobs succeeded")


if __name__ == "__main__":
    main()
