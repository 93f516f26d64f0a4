"""The hub's Training Operator counters (dispatcher/metrics.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from dispatcher.ledger import JobRecord
from dispatcher.metrics import TrainingOperatorCounters
from schemas.status import JobPhase


def test_a_job_s_outcome_series_start_at_zero_when_it_is_created() -> None:
    # A series born at 1 by its first failure shows no increase() to the alert on failing
    # jobs; created at 0 with the job, the first failure is an increase of 1.
    registry = CollectorRegistry()
    counters = TrainingOperatorCounters(registry)
    record = JobRecord(uid="u1", phase=JobPhase.QUEUED, namespace="team-a", framework="jax")
    labels = {"job_namespace": "team-a", "framework": "jax"}
    assert registry.get_sample_value("training_operator_jobs_failed_total", labels) is None
    counters.created(record)
    assert registry.get_sample_value("training_operator_jobs_created_total", labels) == 1
    for outcome in ("deleted", "successful", "failed", "restarted"):
        value = registry.get_sample_value(f"training_operator_jobs_{outcome}_total", labels)
        assert value == 0, outcome
