"""A job pinned by nodeSelector to one real cluster across a rollout of that cluster's worker
(SIGTERM, then a new process): the running job keeps running, a new pinned job submitted
meanwhile waits (WaitingForCluster) and then runs there; nothing is rejected (issue 29)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from schemas.cluster import ClusterSnapshot
from schemas.status import JobPhase
from tests.helpers import jax_job
from tests.kafka.processes import Process
from tests.kube.conftest import GPU_PRODUCT_LABEL, H100
from tests.kube.helpers_e2e import Fleet, running_fleet
from trainhub.producer import submit_document
from trainhub_sandbox.kube_cluster import KubeSandbox

pytestmark = [pytest.mark.kube, pytest.mark.kafka]

PINNED = {GPU_PRODUCT_LABEL: H100}
"""Only the h100 cluster has such nodes."""


def _healthy(snapshot: ClusterSnapshot | None) -> bool:
    return snapshot is not None and snapshot.healthy


def _worker(fleet: Fleet, settings: KafkaSettings, logs: Path, name: str) -> Process:
    cluster = fleet.cluster("h100")
    args = [
        "-v",
        "worker",
        "--backend",
        "kube",
        "--cluster",
        cluster.name,
        "--kubeconfig",
        str(cluster.worker_kubeconfig),
        "--context",
        cluster.worker_context,
        "--bootstrap",
        settings.bootstrap,
        "--topic-prefix",
        fleet.topics.prefix,
        "--heartbeat-interval",
        "0.5",
        *(arg for ns in cluster.worker_namespaces for arg in ("--namespace", ns)),
    ]
    return Process(name, args, logs)


async def test_a_pinned_job_survives_a_rollout_of_its_clusters_worker(
    fleet_sandbox: KubeSandbox, kafka_settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    async with running_fleet(kafka_settings, topics, fleet_sandbox, workers=("small",)) as fleet:
        status = fleet.status
        first = _worker(fleet, kafka_settings, tmp_path, "worker-1")
        second: Process | None = None
        uids: list[str] = []
        try:
            await fleet.wait_registered(["small", "h100"], timeout=60)
            running = jax_job("pinned-run", workers=1, cpu="500m", memory="512Mi", duration="15s")
            running["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = (
                PINNED
            )
            uids.append(await submit_document(fleet.bus, fleet.topics, running))
            await status.wait(lambda: JobPhase.RUNNING in status.phases(uids[0]), 60, "Running")
            assert first.terminate() in (0, -15), first.log()[-3000:]  # a rollout: SIGTERM
            # The worker's last report says it stopped; the new job comes once the hub has
            # read it (on a loaded machine it may lag the exit: a job submitted before that
            # is assigned to h100 and waits on its topic instead, which is another case).
            await status.wait(
                lambda: not _healthy(fleet.snapshot("h100")), 30, "the hub to see h100 stop"
            )
            fresh = jax_job(
                "pinned-new",
                workers=1,
                cpu="500m",
                memory="512Mi",
                duration="1s",
                node_selector=PINNED,
            )
            uids.append(await submit_document(fleet.bus, fleet.topics, fresh))
            await status.wait(
                lambda: any(u.reason == "WaitingForCluster" for u in status.history(uids[1])),
                30,
                "the new pinned job to wait for its cluster",
            )
            waiting = next(u for u in status.history(uids[1]) if u.reason == "WaitingForCluster")
            assert waiting.phase == JobPhase.QUEUED
            assert "h100: its worker stopped" in (waiting.message or "")
            second = _worker(fleet, kafka_settings, tmp_path, "worker-2")
            await status.wait_finished(uids, 120)
            for uid in uids:
                final = status.last(uid)
                assert final.phase == JobPhase.SUCCEEDED, status.history(uid)
                assert final.cluster == "h100"
                assert JobPhase.REJECTED not in status.phases(uid)
        except BaseException:
            logs = (first.log() + (second.log() if second else ""))[-6000:]
            sys.stderr.write(f"--- worker logs ---\n{logs}\n")
            raise
        finally:
            first.terminate()
            if second is not None:
                assert second.terminate() in (0, -15), second.log()[-3000:]
            if uids:
                await fleet.cleanup(uids)
