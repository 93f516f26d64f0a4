"""A broker of a three-node cluster SIGKILLed mid-burst (one that leads no partition 0 of the
jobs topic, then the one that does): with topics of three replicas and min.insync.replicas 2
every job still ends Succeeded exactly once, and submit -> Assigned while the node is gone is
reported (bench/broker_loss.py runs the same and writes the figures down)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.broker_loss import REPLICATION, LossPlan, Victim, run_broker_loss
from tests.kafka.conftest import ClusterHolder

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.mark.parametrize("victim", ["follower", "leader"])
async def test_a_killed_broker_loses_no_job_and_runs_none_twice(
    kafka_cluster: ClusterHolder, tmp_path: Path, victim: Victim
) -> None:
    # 15 s of offering at 20/s; the node is killed 2 s in and down 10 s (past Kafka's 9 s
    # broker session timeout, after which the controller fences it and moves its leaderships).
    plan = LossPlan(victim, jobs=300, rate=20.0, kill_after=40, downtime=10.0)
    kafka_cluster.current, run = await run_broker_loss(kafka_cluster.current, plan, tmp_path)
    report = run.report()

    assert report["topics"]["replicas"] == [REPLICATION] * 3, report["topics"]
    assert report["topics"]["min.insync.replicas"] == 2, report["topics"]
    assert run.killed_led_jobs_0 == (victim == "leader")
    if victim == "leader":
        assert run.jobs_0_leader_after != run.killed, "the leadership never moved"
    else:
        assert not run.killed_was_controller
    assert len(run.submitted) == plan.jobs
    wrong = run.not_succeeded_once
    sample = dict(list(wrong.items())[:10])
    assert not wrong, f"{len(wrong)} not Succeeded exactly once: {sample}\n{run.logs}"
    during = report["submit_to_assigned_during_outage_ms"]
    assert during["jobs"] > 0, report
    before = report["submit_to_assigned_before_ms"]
    print(
        f"\nSIGKILLed node {run.killed} ({victim}; led jobs-0: {run.killed_led_jobs_0}, "
        f"the controller quorum: {run.killed_was_controller}), "
        f"down {run.outage_s:.1f}s (a send held up to {run.longest_send_s:.1f}s); "
        f"{plan.jobs} jobs all Succeeded exactly once; submit -> Assigned of the "
        f"{during['jobs']} due meanwhile: p50 {during['p50']:.0f} ms, p99 "
        f"{during['p99']:.0f} ms, max {during['max']:.0f} ms (before: p99 "
        f"{before.get('p99', 0):.0f} ms)"
    )
