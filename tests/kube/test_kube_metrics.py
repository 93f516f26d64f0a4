"""Kubernetes API request metrics of a `kube` worker, against a real sandbox apiserver: every
request is timed and counted by verb, resource and answer, and the dashboard's and alert
rules' `trainhub_kube_api_*` queries find their series and labels."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.deploy.promql import read_exposition
from tests.deploy.queries import KUBE_API_PREFIX, TARGET_LABELS, all_selectors
from tests.deploy.workload import Scrape
from workers.backends.kube import KubeBackend
from workers.backends.kube_client import KubeForbidden, KubeNotFound
from workers.metrics import worker_metrics

pytestmark = pytest.mark.kube


async def test_requests_are_timed_and_counted_by_verb_resource_and_code(
    east_backend: KubeBackend,
) -> None:
    registry = CollectorRegistry()
    worker_metrics(registry).register_cluster("east")
    before = Scrape(generate_latest(registry).decode())
    api = east_backend.api
    with pytest.raises(KubeNotFound):
        await api.call("get", "pods", "default", api.core.read_namespaced_pod, "absent", "default")
    with pytest.raises(KubeForbidden):
        await api.call("list", "secrets", "default", api.core.list_namespaced_secret, "default")
    scrape = Scrape(generate_latest(registry).decode())

    def added(name: str, **labels: str) -> float:
        # The series are process-wide: other tests on east count into them too.
        return scrape.value(name, cluster="east", **labels) - before.value(
            name, cluster="east", **labels
        )

    # Starting the backend listed the pods (cluster-wide: the worker may read every pod).
    requests = "trainhub_kube_api_requests_total"
    assert scrape.value(requests, cluster="east", verb="list", resource="pods", code="200") >= 1
    assert added(requests, verb="get", resource="pods", code="404") == 1
    assert added(requests, verb="list", resource="secrets", code="403") == 1
    assert added("trainhub_kube_api_request_duration_seconds_count", verb="get") == 1
    assert added("trainhub_kube_api_retries_total") == 0
    # Only the registered cluster's series: other tests' clusters stay out of this registry.
    assert not scrape.has("trainhub_kube_api_requests_total", cluster="west")

    page = read_exposition(scrape.text)
    problems = [
        f"{where}: {s.name} {'has no samples' if s.name not in page.sampled else 'lacks labels'}"
        for where, found in all_selectors().items()
        for s in found
        if s.name.startswith(KUBE_API_PREFIX)
        and (s.name not in page.sampled or not s.labels - TARGET_LABELS <= page.labels[s.name])
    ]
    assert not problems, "\n".join(problems)
