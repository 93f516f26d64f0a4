"""The Grafana dashboard and the Prometheus rules read only what the code exports: a real
embedded system (hub and sim workers sharing one registry) runs jobs that succeed, restart,
fail and get deleted, plus records for the dead-letter topic, and its /metrics page, fetched
over HTTP, must offer every series each query names, with every label it matches on."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

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


# -- units, variables, and alerts per install ------------------------------------------------

_CAPACITY = re.compile(r"\btrainhub_(?:worker_)?cluster_(?:free|reserved|allocatable)\b")


def expected_units(expr: str) -> set[str]:
    """The units a panel may show the series of `expr` in, from what it computes."""
    if _CAPACITY.search(expr):
        if "/" in expr:
            return {"percentunit"}  # used over allocatable
        if 'resource="memory"' in expr:
            return {"bytes"}
        if 'resource="cpu"' in expr:
            return {"suffix: cores"}
        return {"short"}  # GPUs and extended resources: counts
    if "histogram_quantile(" in expr:
        return {"s"} if "_seconds_bucket" in expr else {"short"}
    if any(s.name.endswith("_seconds") for s in selectors(expr)):
        return {"s"}
    if "rate(" in expr and " / " not in expr:  # a counter per second (a ratio has no unit)
        return {"reqps"} if "trainhub_kube_api_" in expr else {"ops"}
    return {"short"}  # counts: jobs, clusters, records, increases over a window


def unit_of(panel: dict[str, Any], ref_id: str) -> str | None:
    """The unit Grafana shows a target's series in: an override of its refId, else the
    panel's default."""
    config = panel.get("fieldConfig", {})
    unit: str | None = config.get("defaults", {}).get("unit")
    for override in config.get("overrides", []):
        if override["matcher"] == {"id": "byFrameRefID", "options": ref_id}:
            for item in override["properties"]:
                if item["id"] == "unit":
                    unit = item["value"]
    return unit


def test_every_panel_shows_its_series_in_their_unit() -> None:
    shown: dict[str, set[str]] = {}
    for panel in panels(load_dashboard()):
        for target in panel.get("targets", []):
            where = f"{panel['title']} / {target['refId']}"
            unit = unit_of(panel, target["refId"])
            assert unit in expected_units(target["expr"]), f"{where}: {unit}"
            shown.setdefault(str(unit), set()).add(where)
    # Each kind is there: bytes for memory, cores for CPU, per-second rates, durations.
    assert {"bytes", "suffix: cores", "ops", "reqps", "s", "percentunit"} <= set(shown)
    assert any("Memory" in where for where in shown["bytes"])
    assert any("CPU" in where for where in shown["suffix: cores"])


def test_expected_units_tell_the_kinds_apart() -> None:
    memory = 'sum(trainhub_cluster_free{namespace=~"$namespace", resource="memory"})'
    assert expected_units(memory) == {"bytes"}
    assert expected_units(memory.replace("memory", "cpu")) == {"suffix: cores"}
    rate = "sum(rate(trainhub_worker_heartbeats_total[5m]))"
    assert expected_units(rate) == {"ops"}
    assert expected_units(f"{rate} / {rate}") == {"short"}
    latency = (
        "histogram_quantile(0.9, sum by (le) (rate(trainhub_placement_latency_seconds_bucket[5m])))"
    )
    assert expected_units(latency) == {"s"}
    assert expected_units(latency.replace("latency_seconds", "score")) == {"short"}


JOB_VARIABLES = {"queue": "queue", "framework": "framework", "job_namespace": "job_namespace"}
"""Dashboard variable -> the label it filters on (framework: the job's kind)."""


def _selector_texts(expr: str) -> list[tuple[str, str]]:
    """(metric, the text between its braces) of each selector of `expr`."""
    return re.findall(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}", expr)


def test_queue_kind_and_job_namespace_variables(scrape: Scrape) -> None:
    """Each is a multi-value query variable (All: everything) on its label, and every panel
    query of a metric that carries the label filters on it."""
    variables = {v["name"]: v for v in load_dashboard()["templating"]["list"]}
    assert {"datasource", "namespace", "cluster", "resource"} <= set(variables)
    assert variables["framework"]["label"] == "Kind"
    page = scrape.page
    for name, label in JOB_VARIABLES.items():
        variable = variables[name]
        assert variable["type"] == "query" and variable["multi"] and variable["includeAll"]
        assert variable["allValue"] == ".*", name
        (values_of,) = selectors(variable["query"]["query"])
        assert label in values_of.labels and label in page.labels[values_of.name], name
    filtered = dict.fromkeys(JOB_VARIABLES, 0)
    for panel in panels(load_dashboard()):
        for target in panel.get("targets", []):
            for metric, matchers in _selector_texts(target["expr"]):
                for name, label in JOB_VARIABLES.items():
                    carries = label in page.labels.get(metric, set())
                    uses = f'{label}=~"${name}"' in matchers
                    assert uses == carries, f"{panel['title']} / {metric}: ${name}"
                    filtered[name] += uses
    assert all(filtered.values()), filtered


_AGGREGATIONS = "sum|min|max|avg|count|group|stddev|stdvar|topk|bottomk|quantile|count_values"
_AGGREGATION_BY = re.compile(rf"\b(?:{_AGGREGATIONS})\s+by\s*\(([^)]*)\)\s*\(")
_AGGREGATION_BARE = re.compile(rf"\b(?:{_AGGREGATIONS})\s*\(")
_METRIC = re.compile(r"\b(?:trainhub|training_operator)_[A-Za-z0-9_:]+")


def not_per_install(expr: str, label: str = "namespace") -> list[str]:
    """The metrics of an alert expression whose innermost aggregation does not keep `label`
    (or that are not aggregated at all); `absent(...)` (no series at all) is exempt."""
    kept: dict[int, bool] = {}  # an opening parenthesis -> whether its aggregation keeps it
    for match in _AGGREGATION_BARE.finditer(expr):
        kept[match.end() - 1] = False
    for match in _AGGREGATION_BY.finditer(expr):
        kept[match.end() - 1] = label in {part.strip() for part in match.group(1).split(",")}
    for match in re.finditer(r"\babsent\s*\(", expr):
        kept[match.end() - 1] = True
    open_at: list[int] = []
    starts = {m.start(): m.group() for m in _METRIC.finditer(expr)}
    found: list[str] = []
    for position, char in enumerate(expr):
        if char == "(":
            open_at.append(position)
        elif char == ")":
            open_at.pop()
        elif position in starts:
            enclosing = [kept[p] for p in open_at if p in kept]
            if not (enclosing and enclosing[-1]):
                found.append(starts[position])
    return found


def test_not_per_install_finds_sums_across_installs() -> None:
    assert not_per_install("increase(trainhub_redispatches_total[30m]) > 5") == [
        "trainhub_redispatches_total"
    ]
    assert not_per_install("sum(increase(training_operator_jobs_failed_total[30m])) >= 3") == [
        "training_operator_jobs_failed_total"
    ]
    inner_drops = "sum by (namespace) (max by (cluster) (trainhub_cluster_lost))"
    assert not_per_install(inner_drops) == ["trainhub_cluster_lost"]
    assert not_per_install("max by (namespace, cluster) (trainhub_cluster_lost) == 1") == []
    assert not_per_install("absent(trainhub_queue_length)") == []


def test_every_alert_is_per_install() -> None:
    """Two installs in one Prometheus alert on their own: every alert aggregates by the
    label Prometheus gives an install's targets (`namespace`)."""
    for where, expr in rule_expressions().items():
        assert not not_per_install(expr), f"{where}: {not_per_install(expr)} summed across installs"
    failing = rule_expressions()["trainhub.jobs / TrainhubJobsFailing"]
    assert "vector(0)" not in failing  # it has no namespace: it would match no install
