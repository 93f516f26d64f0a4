"""The Grafana dashboard and the Prometheus rules read only what the code exports: a real
embedded system (hub and sim workers sharing one registry) runs jobs that succeed, restart,
fail and get deleted, plus records for the dead-letter topic, and its /metrics page, fetched
over HTTP, must offer every series each query names, with every label it matches on."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from tests.deploy.promql import names, selectors
from tests.deploy.queries import (
    dashboard_expressions,
    load_dashboard,
    load_rules,
    panels,
    rule_expressions,
)
from tests.deploy.workload import Scrape, run_workload, scrape_until, settled, unserved_queries
from trainhub.embedded import Embedded, EmbeddedOptions
from workers.cluster_spec import parse_cluster_spec


@pytest.fixture
async def scrape() -> AsyncIterator[Scrape]:
    """/metrics of an embedded system after the workload, read over HTTP."""
    registry = CollectorRegistry()
    options = EmbeddedOptions(
        clusters=[
            parse_cluster_spec("east:cpu=4,memory=8Gi"),
            parse_cluster_spec("west:cpu=8,memory=16Gi,nodes=2"),
        ],
        backend="sim",
        heartbeat_interval=0.2,
    )
    async with Embedded(options, registry=registry) as system:
        server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
        try:
            await run_workload(system.bus, system.topics, junk_for="east")
            url = f"http://127.0.0.1:{server.server_port}/metrics"
            yield await scrape_until([url], settled, timeout=30)
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


async def test_every_queried_series_is_exported_with_its_labels(scrape: Scrape) -> None:
    problems = unserved_queries(scrape)
    assert not problems, "\n".join(problems)


async def test_no_created_series_are_exported(scrape: Scrape) -> None:
    # The counters are there (so would their _created series be, were they on).
    assert scrape.has("training_operator_jobs_created_total")
    assert scrape.has("trainhub_placement_latency_seconds_count")
    created = sorted({n for n, _ in scrape.samples() if n.endswith("_created")})
    assert created == [], created
    assert "_created{" not in scrape.text and "_created " not in scrape.text


async def test_the_numbers_follow_what_happened(scrape: Scrape) -> None:
    jax = {"job_namespace": "default", "framework": "jax"}
    assert scrape.value("training_operator_jobs_created_total", **jax) == 4
    assert scrape.value("training_operator_jobs_successful_total", **jax) == 2
    assert scrape.value("training_operator_jobs_failed_total", **jax) == 1
    assert scrape.value("training_operator_jobs_restarted_total", **jax) == 1
    assert scrape.value("training_operator_jobs_deleted_total", **jax) == 1

    assert scrape.value("trainhub_hub_jobs", phase="Succeeded", queue="team-a") == 1
    assert scrape.value("trainhub_hub_jobs", phase="Failed", framework="jax") == 1
    assert scrape.value("trainhub_hub_jobs", phase="Deleted", queue="default") == 1
    assert scrape.value("trainhub_queue_length", queue="default") == 0
    assert scrape.has("trainhub_queue_length", queue="team-a")
    assert scrape.value("trainhub_placement_latency_seconds_count") == 4
    assert scrape.value("trainhub_placements_total", outcome="assigned") == 4

    assert scrape.value("trainhub_cluster_allocatable", cluster="west", resource="cpu") == 16
    assert scrape.value("trainhub_cluster_allocatable", cluster="east", resource="memory") == (
        8 * 2**30
    )
    assert scrape.value("trainhub_cluster_nodes", cluster="west") == 2
    for cluster in ("east", "west"):
        assert scrape.value("trainhub_cluster_healthy", cluster=cluster) == 1
        assert 0 <= scrape.value("trainhub_cluster_heartbeat_age_seconds", cluster=cluster) < 5
        assert scrape.value("trainhub_cluster_free", cluster=cluster, resource="cpu") <= (
            scrape.value("trainhub_cluster_allocatable", cluster=cluster, resource="cpu")
        )
        assert scrape.has("trainhub_reservations", cluster=cluster)

    assert scrape.value("trainhub_dead_letters_total", component="hub") == 1
    assert scrape.value("trainhub_worker_dead_letters_total", cluster="east") == 1
    assert scrape.value("trainhub_worker_dead_letters_total", cluster="west") == 0
    assert scrape.value("trainhub_worker_pod_restarts_total") == 1
    for topic in ("trainhub.jobs", "trainhub.status", "trainhub.clusters"):
        assert scrape.has("trainhub_bus_consumer_lag", component="hub", topic=topic)
    for cluster in ("east", "west"):
        topic = f"trainhub.assignments.{cluster}"
        assert scrape.has("trainhub_bus_consumer_lag", component="worker", topic=topic)


def test_the_dashboard_is_a_grafana_dashboard_on_a_datasource_variable() -> None:
    dashboard = load_dashboard()
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    every = panels(dashboard)
    ids = [p["id"] for p in every]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in every:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert target["refId"] and target["expr"], panel["title"]
    used = {v for expr in dashboard_expressions().values() for v in re.findall(r"\$(\w+)", expr)}
    assert used - {"__rate_interval"} <= set(variables), "every variable a query uses exists"


def test_every_dashboard_query_keeps_to_the_chosen_namespace() -> None:
    """Two installs in one Prometheus must not add up: every series a panel or a variable
    reads is filtered by the namespace variable (All matches series without the label too)."""
    variables = {v["name"]: v for v in load_dashboard()["templating"]["list"]}
    namespace = variables["namespace"]
    assert namespace["includeAll"] and namespace["allValue"] == ".*"
    for where, expr in dashboard_expressions().items():
        if where == "variable namespace":
            continue
        for selector in selectors(expr):
            assert "namespace" in selector.labels, f"{where}: {selector.name}"
        assert expr.count('namespace=~"$namespace"') == len(selectors(expr)), where


@pytest.mark.parametrize(
    "topic",
    [
        ("Job throughput", {"training_operator_jobs_created_total"}),
        ("Placement latency", {"trainhub_placement_latency_seconds_bucket"}),
        ("Queue depth", {"trainhub_queue_length"}),
        ("Utilisation", {"trainhub_cluster_free", "trainhub_cluster_allocatable"}),
        ("Failures and re-dispatches", {"trainhub_redispatches_total"}),
        ("Heartbeat age", {"trainhub_cluster_heartbeat_age_seconds"}),
        ("Consumer lag", {"trainhub_bus_consumer_lag"}),
        ("Dead letters", {"trainhub_dead_letters_total"}),
        ("Request latency", {"trainhub_kube_api_request_duration_seconds_bucket"}),
        ("Errors", {"trainhub_kube_api_requests_total"}),
    ],
    ids=lambda topic: topic[0],
)
def test_the_dashboard_has_a_panel_for(topic: tuple[str, set[str]]) -> None:
    title, wanted = topic
    panel = next(p for p in panels(load_dashboard()) if p["title"] == title)
    read = {n for t in panel["targets"] for n in names(selectors(t["expr"]))}
    assert wanted <= read


_DURATION = re.compile(r"^(\d+(ms|[smhdwy]))+$")


def test_the_alert_rules_are_well_formed() -> None:
    rules = load_rules()
    assert set(rules) == {"groups"}
    alerts: list[str] = []
    for group in rules["groups"]:
        assert set(group) <= {"name", "interval", "limit", "rules"} and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
            alerts.append(rule["alert"])
            assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", rule["alert"])
            assert isinstance(rule["expr"], str) and selectors(rule["expr"]), rule["alert"]
            assert rule["expr"].count("(") == rule["expr"].count(")"), rule["alert"]
            if "for" in rule:
                assert _DURATION.match(rule["for"]), rule["alert"]
            assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
            assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
    assert len(alerts) == len(set(alerts)), "alert names must be unique"
    expected = {"TrainhubClusterLost", "TrainhubDeadLetterQueueGrowing", "TrainhubConsumerLagHigh"}
    assert expected <= set(alerts)
    assert set(rule_expressions()) == {
        f"{g['name']} / {r['alert']}" for g in rules["groups"] for r in g["rules"]
    }
