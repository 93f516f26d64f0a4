"""Every PromQL expression of the Grafana dashboard and the Prometheus rules in deploy/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.promql import Selector, selectors

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "trainhub.json"
RULES = DEPLOY / "prometheus" / "trainhub-rules.yaml"


def load_dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def load_rules() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return loaded


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows' collapsed panels included."""
    found: list[dict[str, Any]] = []
    for panel in dashboard.get("panels", []):
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def dashboard_expressions() -> dict[str, str]:
    """`panel title / refId` (or `variable NAME`) -> expression."""
    dashboard = load_dashboard()
    found: dict[str, str] = {}
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            found[f"{panel['title']} / {target['refId']}"] = target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            found[f"variable {variable['name']}"] = (
                query["query"] if isinstance(query, dict) else query
            )
    return found


def rule_expressions() -> dict[str, str]:
    return {
        f"{group['name']} / {rule.get('alert') or rule.get('record')}": rule["expr"]
        for group in load_rules()["groups"]
        for rule in group["rules"]
    }


def all_selectors() -> dict[str, list[Selector]]:
    """Where -> the metric selectors its expression reads."""
    expressions = {**dashboard_expressions(), **rule_expressions()}
    return {where: selectors(expr) for where, expr in expressions.items()}


TARGET_LABELS = frozenset({"namespace"})
"""Labels Prometheus gives every series of a target it discovered through the chart's
ServiceMonitor, rather than labels the code exports."""

KUBE_API_PREFIX = "trainhub_kube_api_"
"""Series only a `kube` worker produces: checked with a sandbox cluster (tests/kube)."""
