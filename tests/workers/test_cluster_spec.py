"""`NAME:cpu=8,memory=16Gi,...` as `trainhub up --cluster` and `worker --capacity` read it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from typer.testing import CliRunner

from schemas.cluster import ClusterPolicy
from trainhub.cli import app
from workers.cluster_spec import parse_cluster_spec


def test_a_spec_gives_per_node_resources_labels_and_a_node_count() -> None:
    spec = parse_cluster_spec("east:cpu=8,memory=16Gi,gpu=2,nodes=3,label.zone=a")
    assert spec.name == "east" and spec.nodes == 3 and spec.labels == {"zone": "a"}
    assert spec.allocatable == {
        "cpu": Decimal(8),
        "memory": Decimal(16 * 2**30),
        "nvidia.com/gpu": Decimal(2),
        "pods": Decimal(110),
    }
    assert parse_cluster_spec("solo").allocatable["cpu"] == Decimal(4)  # the default size


def test_a_spec_may_allow_privileges_and_keeps_the_default_size_without_resources() -> None:
    spec = parse_cluster_spec("host:nodes=2,allow=hostNetwork,allow=hostPath,label.zone=a")
    assert spec.policy == ClusterPolicy(allowHostNetwork=True, allowHostPath=True)
    strict = parse_cluster_spec("locked:pod-security=restricted,allow=hostIPC")
    assert strict.policy == ClusterPolicy(podSecurity="restricted", allowHostIPC=True)
    assert spec.nodes == 2 and spec.allocatable["cpu"] == Decimal(4)
    assert parse_cluster_spec("plain:cpu=2,memory=1Gi").policy == ClusterPolicy()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A_B:cpu=4,memory=8Gi", "cluster name 'A_B' is not a DNS-1123 label"),
        ("a:cpu=-1,memory=8Gi", "cpu cannot be negative (-1)"),
        ("a:cpu=4,mem=8Gi", "no memory given (a misspelt key such as 'mem'"),
        ("a:cpu=4,memory=8Gi,nodes=-1", "nodes must be a count of at least 1"),
        ("a:cpu=4,memory=8Gi,nodes=two", "nodes must be a count of at least 1"),
        ("a:cpu", "'cpu' is not key=value"),
        (":cpu=4", "has no name"),
        ("a:cpu=x,memory=8Gi", "cluster spec 'a:cpu=x,memory=8Gi': cpu: not a quantity: 'x'"),
        ("a:allow=hostUsers", "cluster spec 'a:allow=hostUsers': unknown pod privilege"),
        ("a:pod-security=strict", "unknown pod security level 'strict'; known: privileged,"),
        ("a:cpu=4,memory=8Gi,cpu=2", "cpu is given twice"),
        ("a:cpu=4,memory=8Gi,gpu=2,nvidia.com/gpu=4", "nvidia.com/gpu is given twice"),
        ("a:cpu=4,memory=8Gi,gpu=1.5", "gpu: an extended resource is a whole number (got 1.5)"),
        ("a:label.=x", "label key '' is not a Kubernetes label key"),
        ("a:label.k/x/y=z", "label key 'k/x/y' is not a Kubernetes label key"),
        ("a:label.k=v=w", "label value 'v=w' of k is not a Kubernetes label value"),
    ],
)
def test_bad_specs_are_refused_with_the_reason(text: str, expected: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_cluster_spec(text)
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["up", "--cluster", "a:cpu=4,memory=8Gi", "--cluster", "a"], "names must differ"),
        (["up", "--backend", "kube"], "use --sandbox"),
        (["up", "--cluster", "a:cpu=4,mem=8Gi"], "no memory given"),
        (["worker", "--cluster", "X_Y", "--backend", "sim"], "is not a DNS-1123 label"),
        (["worker", "--cluster", "a", "--label", "novalue"], "--label takes KEY=VALUE"),
        (["worker", "--cluster", "a", "--label", "zone=eu west"], "is not a Kubernetes label"),
        (["worker", "--cluster", "a", "--backend", "foo"], "unknown backend 'foo': kube, local"),
        (["up", "--exit-on-finish"], "name at least one file"),
        (
            ["worker", "--cluster", "a", "--backend", "sim", "--capacity", "allow=hostPID"],
            "privileges by --allow NAME",
        ),
    ],
)
def test_bad_cli_input_is_one_line_of_error_not_a_traceback(args: list[str], expected: str) -> None:
    result = CliRunner().invoke(app, [*args, "--bootstrap", "127.0.0.1:1"])
    # Flag mistakes are usage errors: 2, as typer's own.
    assert result.exit_code == 2, result.output
    assert expected in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
