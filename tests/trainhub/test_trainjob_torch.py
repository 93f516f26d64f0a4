"""A TrainJob on the torch-distributed runtime trained with real PyTorch on the `local`
backend: two nodes, each a process running `torchrun`, which reads the runtime's PET_*
variables, rendezvous at node 0 and starts the script; DistributedDataParallel averages the
gradients over gloo, so both processes end with the same weights."""

from __future__ import annotations

from pathlib import Path

import yaml

from schemas.status import JobPhase
from trainhub.embedded import Embedded, EmbeddedOptions
from workers.cluster_spec import parse_cluster_spec

ROOT = Path(__file__).resolve().parents[2]


def _value(log: str, name: str) -> str:
    return log.split(f"{name}=")[1].split()[0]


async def test_a_torch_trainjob_trains_with_ddp_across_two_local_processes(tmp_path: Path) -> None:
    document = yaml.safe_load((ROOT / "examples/trainjob-torch-ddp/trainjob.yaml").read_text())
    options = EmbeddedOptions(
        clusters=[parse_cluster_spec("solo:cpu=4,memory=8Gi")],
        backend="local",
        heartbeat_interval=0.2,
        logs_dir=tmp_path,
        workdir=ROOT,
    )
    async with Embedded(options) as system:
        uid = await system.submit(document)
        final = await system.wait_finished([uid], timeout=240)
        logs = await system.pod_logs(final[uid])
    assert final[uid].phase == JobPhase.SUCCEEDED, logs
    first, second = logs["torch-ddp-node-0-0"], logs["torch-ddp-node-0-1"]
    # torchrun gave node 0's process rank 0 and node 1's rank 1 of a world of two.
    assert "[rank 0/2] node 0 joined" in first, first
    assert "[rank 1/2] node 1 joined" in second, second
    # One model: DDP's all-reduce kept the weights identical on both processes.
    assert _value(first, "weights_checksum") == _value(second, "weights_checksum")
    assert float(_value(first, "test_accuracy")) == float(_value(second, "test_accuracy")) > 0.9
