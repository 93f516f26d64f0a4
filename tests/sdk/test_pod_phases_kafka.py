"""Pod phases through a real broker: the SDK asks a `sim` worker process (the hub another
process) for a running job's pods, and within the default timeout they are Running."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.helpers import jax_job
from tests.kafka.processes import Process, sim_worker
from tests.kafka_target import KafkaTarget
from trainhub import TrainHubClient

pytestmark = pytest.mark.kafka


def test_a_running_jobs_pods_are_running_as_its_worker_process_tells(
    kafka: KafkaTarget, tmp_path_factory: pytest.TempPathFactory
) -> None:
    logs = tmp_path_factory.mktemp("pod-phases")
    prefix = f"pods{uuid.uuid4().hex[:10]}"
    common = ["--bootstrap", kafka.bootstrap, "--topic-prefix", prefix]
    hub = Process("hub", ["hub", *common], logs)
    worker = sim_worker("solo", common, logs)
    try:
        with TrainHubClient(kafka.bootstrap, prefix) as client:
            client.create_job(jax_job("busy", duration="120s"))
            client.wait_for_job_conditions("busy", expected_conditions={"Running"}, timeout=120)
            deadline = time.monotonic() + 60
            pods = client.get_job_pods("busy")
            while [p.phase for p in pods] != ["Running", "Running"]:
                assert time.monotonic() < deadline, (pods, worker.log()[-3000:])
                time.sleep(0.5)
                pods = client.get_job_pods("busy")
            assert [(p.name, p.cluster) for p in pods] == [
                ("busy-worker-0", "solo"),
                ("busy-worker-1", "solo"),
            ]
            assert all(p.node_name and p.start_time for p in pods)
            client.delete_job("busy")
    finally:
        assert hub.terminate() in (0, -15), hub.log()[-2000:]
        assert worker.terminate() in (0, -15), worker.log()[-2000:]
