"""Node constraints and cluster wishes read from a job: nodeAffinity, label selectors."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.demand import (
    LabelRequirement,
    NodeSelectorTerm,
    job_demand,
    parse_label_selector,
    parse_node_affinity,
)
from dispatcher.placement import plan_placement
from schemas.job_parsing import parse_job
from tests.helpers import cluster, jax_job, node
from workers.rendering import render_job


def required(
    *expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    term: dict[str, Any] = {"matchExpressions": list(expressions)}
    if fields:
        term["matchFields"] = fields
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


@pytest.mark.parametrize(
    ("operator", "values", "labels", "matches"),
    [
        ("In", ["a", "b"], {"k": "a"}, True),
        ("In", ["a"], {"k": "c"}, False),
        ("In", ["a"], {}, False),
        ("NotIn", ["a"], {"k": "b"}, True),
        ("NotIn", ["a"], {}, True),
        ("NotIn", ["a"], {"k": "a"}, False),
        ("Exists", [], {"k": ""}, True),
        ("Exists", [], {}, False),
        ("DoesNotExist", [], {}, True),
        ("DoesNotExist", [], {"k": "x"}, False),
        ("Gt", ["3"], {"k": "4"}, True),
        ("Gt", ["3"], {"k": "3"}, False),
        ("Gt", ["3"], {"k": "many"}, False),
        ("Gt", ["3"], {"k": "1_0"}, False),  # int() would read 10
        ("Gt", ["3"], {"k": " 7"}, False),
        ("Gt", ["3"], {"k": "99999999999999999999"}, False),  # past int64
        ("Lt", ["3"], {"k": "-7"}, True),
        ("Lt", ["3"], {"k": "-1"}, True),
        ("Lt", ["3"], {}, False),
    ],
)
def test_requirement_operators(
    operator: str, values: list[str], labels: dict[str, str], matches: bool
) -> None:
    terms, _ = parse_node_affinity(required({"key": "k", "operator": operator, "values": values}))
    assert terms[0].matches("node", labels) is matches


def test_terms_are_ored_and_expressions_anded_and_fields_name_the_node() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "zone", "operator": "In", "values": ["a"]},
                            {"key": "gpu", "operator": "Exists"},
                        ]
                    },
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]},
                ]
            }
        }
    }
    terms, _ = parse_node_affinity(affinity)
    assert any(t.matches("n1", {"zone": "a", "gpu": "x"}) for t in terms)
    assert not any(t.matches("n1", {"zone": "a"}) for t in terms)
    assert any(t.matches("n9", {}) for t in terms)
    assert not NodeSelectorTerm().matches("n1", {"zone": "a"})  # an empty term matches nothing


@pytest.mark.parametrize(
    ("affinity", "complaint"),
    [
        ({"nodeAffinity": 5}, "nodeAffinity: must be a mapping (got 5)"),
        (
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
            "nodeSelectorTerms: must be a list (got None)",
        ),
        (
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
                }
            },
            "must have at least one term",
        ),
        (required({"key": "k", "operator": "Near", "values": ["a"]}), "operator: must be one of"),
        (required({"key": "k", "operator": "In"}), "values: must not be empty for operator In"),
        (required({"key": "k", "operator": "Exists", "values": ["a"]}), "must be empty"),
        (required({"key": "k", "operator": "Gt", "values": ["x"]}), "takes one integer"),
        (required({"key": "", "operator": "Exists"}), "key: must be a label key"),
        (required({"key": "k", "operator": "In", "values": [1]}), "values: must be strings"),
        (
            required(fields=[{"key": "spec.unschedulable", "operator": "In", "values": ["x"]}]),
            "only 'metadata.name' is supported",
        ),
        (
            {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 0, "preference": {}}
                    ]
                }
            },
            "weight: must be 1..100 (got 0)",
        ),
        (
            required(*[{"key": f"k{i}", "operator": "Exists"} for i in range(65)]),
            "at most 64 entries are accepted (got 65)",
        ),
    ],
)
def test_malformed_node_affinity_names_the_field(affinity: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValueError, match="affinity") as raised:
        parse_node_affinity(affinity, "spec.x.affinity.nodeAffinity")
    assert complaint in str(raised.value)


def test_required_node_affinity_filters_nodes_in_the_gang_fit() -> None:
    doc = jax_job("aff", workers=1)
    doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"] = required(
        {"key": "zone", "operator": "NotIn", "values": ["b"]}
    )
    in_b = node("b1", cpu="8", memory="8Gi")
    in_b.labels["zone"] = "b"
    in_a = node("a1", cpu="8", memory="8Gi")
    in_a.labels["zone"] = "a"
    placement = plan_placement(
        parse_job(doc), [cluster("zone-b", in_b), cluster("zone-a", in_a)], explain=True
    )
    assert placement.chosen == "zone-a"
    reason = next(c.reason for c in placement.full_decision().clusters if c.name == "zone-b")
    assert "required nodeAffinity (zone notin (b))" in (reason or "")
    assert placement.usage == {"a1": {"cpu": 1, "memory": 2**30}}


def test_a_malformed_node_affinity_rejects_the_job_with_the_field() -> None:
    doc = jax_job("bad-aff", workers=1)
    doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"] = required(
        {"key": "zone", "operator": "Within", "values": ["b"]}
    )
    placement = plan_placement(parse_job(doc), [cluster("c", node("a", cpu="8", memory="8Gi"))])
    assert placement.never_fits
    assert (
        "spec.jaxReplicaSpecs.Worker.template.spec.affinity.nodeAffinity."
        "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]"
        ".operator: must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt (got 'Within')"
    ) in (placement.problem or "")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("region=eu", (LabelRequirement("region", "In", frozenset({"eu"})),)),
        ("region==eu", (LabelRequirement("region", "In", frozenset({"eu"})),)),
        ("tier!=bronze", (LabelRequirement("tier", "NotIn", frozenset({"bronze"})),)),
        (
            "zone in (a, b),example.com/spot notin (yes)",
            (
                LabelRequirement("zone", "In", frozenset({"a", "b"})),
                LabelRequirement("example.com/spot", "NotIn", frozenset({"yes"})),
            ),
        ),
        (
            "gpu, !spot",
            (LabelRequirement("gpu", "Exists"), LabelRequirement("spot", "DoesNotExist")),
        ),
    ],
)
def test_label_selector_syntax(text: str, expected: tuple[LabelRequirement, ...]) -> None:
    assert parse_label_selector(text) == expected


@pytest.mark.parametrize("text", ["region=(eu", "a in ()", "=eu", "a b", "x" * 5000, "k in (a,)"])
def test_bad_label_selectors_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_label_selector(text)


DATA = Path(__file__).resolve().parents[1] / "data" / "kubeflow"


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.yaml")))
def test_placement_counts_each_pod_as_the_worker_renders_it(name: str) -> None:
    # Init containers the operator adds (MPI's kubectl-delivery: 100m, 512Mi; PyTorch's
    # wait-for-master on Workers: 50m, 10Mi) are part of what the scheduler reserves, so
    # placement must count them too.
    job = parse_job(yaml.safe_load((DATA / name).read_text()))
    rendered = render_job(job)
    for demand in job_demand(job):
        pods = [p for p in rendered.pods if p.replica_type == demand.replica_type]
        assert len(pods) == demand.count
        for pod in pods:
            assert pod.requests == demand.requests, (name, pod.name)


def test_an_mpi_launcher_without_requests_still_needs_its_delivery_init_container() -> None:
    document = yaml.safe_load((DATA / "mpi-pi.yaml").read_text())
    launcher = document["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    for container in launcher["containers"]:
        container.pop("resources", None)
    needs = {d.replica_type: d.requests for d in job_demand(parse_job(document))}
    assert needs["Launcher"] == {"cpu": Decimal("0.1"), "memory": Decimal(512 * 2**20)}
    delivery = next(
        c
        for c in render_job(parse_job(document)).pods[0].spec.initContainers or []
        if c.name == "kubectl-delivery"
    )
    assert delivery.resources is not None
    assert delivery.model_dump(exclude_none=True)["resources"] == {
        "requests": {"cpu": "100m", "memory": "512Mi"},
        "limits": {"cpu": "100m", "memory": "512Mi"},
    }


def test_pytorch_workers_without_requests_still_need_their_wait_for_master_container() -> None:
    document = yaml.safe_load((DATA / "pytorch-simple.yaml").read_text())
    specs = document["spec"]["pytorchReplicaSpecs"]
    for rspec in specs.values():
        for container in rspec["template"]["spec"]["containers"]:
            container.pop("resources", None)
    needs = {d.replica_type: d.requests for d in job_demand(parse_job(document))}
    assert needs["Worker"] == {"cpu": Decimal("0.05"), "memory": Decimal(10 * 2**20)}
    assert needs["Master"] == {}
    rendered = render_job(parse_job(document))
    worker = next(p for p in rendered.pods if p.replica_type == "Worker")
    assert worker.requests == needs["Worker"]
    # Without a Master nothing waits: no init container, nothing added.
    del specs["Master"]
    assert {d.replica_type: d.requests for d in job_demand(parse_job(document))} == {"Worker": {}}


def test_an_empty_label_value_reads_as_one_in_the_refusal() -> None:
    (equal,) = parse_label_selector("region=")
    (unequal,) = parse_label_selector("region!=")
    assert (str(equal), str(unequal)) == ('region in ("")', 'region notin ("")')
    assert equal.matches({"region": ""}) and not equal.matches({})
