"""Upstream Kubeflow documents parse unchanged; bad input is refused with field and value."""

from __future__ import annotations

import itertools
import json
import re
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.errors import JobInvalid
from schemas.job_parsing import job_uid_of, load_documents, parse_job, read_text
from schemas.quantity import QuantityError, format_quantity, parse_quantity
from tests.helpers import jax_job

DATA = Path(__file__).parent.parent / "data" / "kubeflow"
UPSTREAM = sorted(DATA.glob("*.yaml"))


def _same_leaf(original: Any, dumped: Any) -> bool:
    if original == dumped or str(original) == str(dumped):
        return True
    try:
        return parse_quantity(original) == parse_quantity(dumped)
    except QuantityError:
        return False


def assert_preserved(original: Any, dumped: Any, path: str = "") -> None:
    """Everything the user wrote is still there with the same meaning."""
    if isinstance(original, dict):
        assert isinstance(dumped, dict), path
        for key, value in original.items():
            assert key in dumped, f"{path}.{key} was dropped"
            assert_preserved(value, dumped[key], f"{path}.{key}")
    elif isinstance(original, list):
        assert isinstance(dumped, list) and len(dumped) == len(original), path
        for i, (a, b) in enumerate(zip(original, dumped, strict=True)):
            assert_preserved(a, b, f"{path}[{i}]")
    else:
        assert _same_leaf(original, dumped), f"{path}: {original!r} became {dumped!r}"


@pytest.mark.parametrize("path", UPSTREAM, ids=lambda p: p.stem)
def test_upstream_documents_round_trip(path: Path) -> None:
    original = yaml.safe_load(path.read_text())
    job = parse_job(original)
    dumped = job.to_document()
    assert_preserved(original, dumped)
    again = parse_job(dumped)
    assert again == job
    assert job.kind == original["kind"]


def test_all_six_kinds_are_covered() -> None:
    kinds = {yaml.safe_load(p.read_text())["kind"] for p in UPSTREAM}
    assert kinds == {"TFJob", "PyTorchJob", "XGBoostJob", "MPIJob", "PaddleJob", "JAXJob"}


def test_replica_type_keys_are_case_normalised() -> None:
    doc = jax_job("lower")
    doc["spec"]["jaxReplicaSpecs"] = {"worker": doc["spec"]["jaxReplicaSpecs"]["Worker"]}
    job = parse_job(doc)
    assert list(job.replica_specs) == ["Worker"]
    assert job.total_replicas == 2


def test_run_policy_and_managed_by() -> None:
    job = parse_job(jax_job("managed"))
    assert job.run_policy.managed_by_trainhub
    assert not parse_job(jax_job("other", managed=False)).run_policy.managed_by_trainhub


def test_managed_by_names_a_known_controller_or_the_job_is_refused() -> None:
    for manager in ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"):
        doc = jax_job("theirs")
        doc["spec"]["runPolicy"]["managedBy"] = manager
        assert parse_job(doc).run_policy.managedBy == manager
    # A typo of trainhub's own value must not pass for someone else's job, left alone quietly.
    doc = jax_job("typo")
    doc["spec"]["runPolicy"]["managedBy"] = "trainhub.io/dispatch"
    with pytest.raises(JobInvalid) as refused:
        parse_job(doc)
    message = str(refused.value)
    assert "spec.runPolicy.managedBy" in message and "'trainhub.io/dispatch'" in message
    assert "'trainhub.io/dispatcher'" in message and "'kueue.x-k8s.io/multikueue'" in message


def test_uid_is_stable_for_the_same_name() -> None:
    a, b = parse_job(jax_job("same")), parse_job(jax_job("same"))
    assert a.uid == b.uid == job_uid_of(jax_job("same"))
    assert a.uid != parse_job(jax_job("same", namespace="other")).uid


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.update(kind="MXJob"), "MXJob was removed in Kubeflow Training Operator v1.9"),
        (lambda d: d.update(kind="SparkJob"), "unknown kind 'SparkJob'"),
        (lambda d: d.update(apiVersion="kubeflow.org/v2"), "apiVersion"),
        (
            lambda d: d["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][
                0
            ].pop("image"),
            "containers.0.image: field required",
        ),
        (
            lambda d: d["spec"]["jaxReplicaSpecs"]["Worker"].update(replicas=-1),
            "jaxReplicaSpecs.Worker.replicas: Input should be greater than or equal to 0 (got -1)",
        ),
        (
            lambda d: d["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
                "resources"
            ]["requests"].update(cpu="lots"),
            "resources.requests.cpu: not a quantity: 'lots'",
        ),
        (
            lambda d: d["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
                "resources"
            ]["requests"].update(memory="-1Gi"),
            "must not be negative",
        ),
        (lambda d: d["metadata"].update(name="Bad_Name"), "metadata.name: job name 'Bad_Name'"),
        (
            lambda d: d["spec"]["jaxReplicaSpecs"].update(
                PS=d["spec"]["jaxReplicaSpecs"]["Worker"]
            ),
            "replica type 'PS' is not valid for JAXJob",
        ),
        (lambda d: d["spec"].update(bogus=1), "spec.bogus: Extra inputs are not permitted"),
    ],
)
def test_bad_jobs_name_field_and_value(mutate: Any, expected: str) -> None:
    doc = jax_job("bad")
    mutate(doc)
    with pytest.raises(JobInvalid) as caught:
        parse_job(doc)
    assert expected in str(caught.value)


def test_kind_specific_rules() -> None:
    pytorch = yaml.safe_load((DATA / "pytorch-simple.yaml").read_text())
    pytorch["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    with pytest.raises(JobInvalid, match=r"Master\.replicas: must be 1"):
        parse_job(pytorch)
    elastic = yaml.safe_load((DATA / "pytorch-elastic.yaml").read_text())
    elastic["spec"]["pytorchReplicaSpecs"] = {
        "Master": elastic["spec"]["pytorchReplicaSpecs"]["Worker"] | {"replicas": 1}
    }
    with pytest.raises(JobInvalid, match="elastic PyTorchJob must configure Workers"):
        parse_job(elastic)
    tf = yaml.safe_load((DATA / "tf-dist-mnist.yaml").read_text())
    tf["spec"]["tfReplicaSpecs"]["Chief"] = tf["spec"]["tfReplicaSpecs"]["PS"]
    with pytest.raises(JobInvalid, match="at most one Chief"):
        parse_job(tf)


def _load(path: Path) -> list[Any]:
    return load_documents(read_text(path), str(path))


def _names(path: Path) -> list[str]:
    return [parse_job(document).metadata.name for document in _load(path)]


def test_malformed_yaml_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: kubeflow.org/v1\nkind: [unclosed\n")
    with pytest.raises(JobInvalid, match="not valid YAML or JSON") as refused:
        _load(bad)
    # The line and column are given in the file's own name, not "<unicode string>".
    assert f'in "{bad}", line 2' in str(refused.value)
    with pytest.raises(JobInvalid, match="not valid YAML or JSON"):
        load_documents('{"kind": ', "inline")


def test_job_files_in_every_yaml_and_json_form(tmp_path: Path) -> None:
    job = jax_job("forms", workers=1)
    flow = tmp_path / "flow.yaml"  # flow-style YAML starts like JSON
    flow.write_text(yaml.safe_dump(job, default_flow_style=True).replace('"', ""))
    assert flow.read_text().startswith("{")
    listed = tmp_path / "list.yaml"  # a YAML list of jobs, as a JSON array is
    listed.write_text(yaml.safe_dump([job, jax_job("second", workers=1)]))
    bom = tmp_path / "bom.json"  # as some editors save
    bom.write_bytes(b"\xef\xbb\xbf[" + json.dumps(job).encode() + b"]")
    assert _names(flow) == ["forms"]
    assert _names(listed) == ["forms", "second"]
    assert _names(bom) == ["forms"]


def test_unreadable_or_oversized_files_are_one_line_errors(tmp_path: Path) -> None:
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(JobInvalid, match=r"model.bin: not UTF-8 text \(byte 128\)"):
        _load(binary)
    # A kilobyte of YAML aliases that expands to 9^9 lists is refused at once.
    bomb = tmp_path / "bomb.yaml"
    letters = "abcdefghi"
    lines = ["a: &a [x,x,x,x,x,x,x,x,x]"]
    lines += [f"{c}: &{c} [{','.join(['*' + p] * 9)}]" for p, c in itertools.pairwise(letters)]
    bomb.write_text("\n".join(lines) + "\n")
    started = time.monotonic()
    with pytest.raises(JobInvalid, match=r"bomb.yaml: .*aliases expand to more than 1000000"):
        _load(bomb)
    assert time.monotonic() - started < 10
    # Without aliases, as many containers are refused by their count (Kafka's limit aside).
    wide = tmp_path / "wide.yaml"
    wide.write_text(json.dumps({"metadata": {"name": "wide"}, "spec": [[]] * 100_001}))
    with pytest.raises(JobInvalid, match="more than 100000 mappings and lists"):
        _names(wide)


def test_sim_annotations_are_checked_at_submission() -> None:
    # A typo used to surface as a traceback in the sim pod task, the job Running for ever.
    for name, value, message in (
        ("trainhub.io/sim-duration", "bogus", "not a duration: 'bogus'"),
        ("trainhub.io/sim-duration", "nan", "between 0 and ten years"),
        ("trainhub.io/sim-duration", "-1", "between 0 and ten years"),
        ("trainhub.io/sim-exit-code", "x", "not an exit code 0..255: 'x'"),
        ("trainhub.io/sim-exit-code", "256", "not an exit code"),
    ):
        job = jax_job("sim", workers=1)
        template = job["spec"]["jaxReplicaSpecs"]["Worker"]["template"]
        template.setdefault("metadata", {}).setdefault("annotations", {})[name] = value
        path = f"spec.jaxReplicaSpecs.Worker.template.metadata.annotations[{name}]"
        with pytest.raises(JobInvalid, match=re.escape(path) + ".*" + re.escape(message)):
            parse_job(job)
    fine = jax_job("sim", workers=1, duration="1m30s", exit_code="3")
    assert parse_job(fine).metadata.name == "sim"


def test_numbers_and_switches_are_not_coerced_from_other_types() -> None:
    # As the apiserver decodes them: "2" is no int32, "yes" no bool (pydantic would coerce).
    def worker(job: dict[str, Any]) -> dict[str, Any]:
        replica: dict[str, Any] = job["spec"]["jaxReplicaSpecs"]["Worker"]
        return replica

    cases: list[tuple[str, Any]] = [
        ("replicas", "2"),
        ("replicas", True),
        ("replicas", 2.0),
        ("suspend", "yes"),
        ("suspend", 1),
        ("backoffLimit", "3"),
        ("backoffLimit", True),
    ]
    for field, value in cases:
        job = jax_job("typed", workers=1)
        if field == "replicas":
            worker(job)["replicas"] = value
        else:
            job["spec"]["runPolicy"][field] = value
        with pytest.raises(JobInvalid, match=field):
            parse_job(job)
    job = jax_job("typed", workers=1)
    container = worker(job)["template"]["spec"]["containers"][0]
    container["ports"] = [{"name": "jaxjob-port", "containerPort": "6666"}]
    with pytest.raises(JobInvalid, match="containerPort"):
        parse_job(job)


def test_pod_template_fields_the_apiserver_refuses_are_refused_at_submission() -> None:
    def job_with(change: Any) -> dict[str, Any]:
        job = jax_job("pods", workers=1)
        change(job["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"])
        return job

    def container(spec: dict[str, Any]) -> dict[str, Any]:
        first: dict[str, Any] = spec["containers"][0]
        return first

    cases: list[tuple[Any, str]] = [
        (lambda s: s["containers"].append({"name": "Side_Car", "image": "x"}), "DNS label"),
        (lambda s: s["containers"].append({"name": "jax", "image": "x"}), "'jax' is given twice"),
        (lambda s: container(s).update(env=[{"name": "A=B", "value": "1"}]), "without '='"),
        (
            lambda s: container(s).update(
                ports=[{"name": "a-very-long-port-name", "containerPort": 1}]
            ),
            "at most 15",
        ),
        (
            lambda s: container(s).update(
                ports=[{"name": "p", "containerPort": 1}, {"name": "p", "containerPort": 2}]
            ),
            "'p' is given twice",
        ),
        (
            lambda s: s.update(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
            "value must be empty",
        ),
        (lambda s: s.update(tolerations=[{"effect": "NoSchedule"}]), "operator must be Exists"),
        (
            lambda s: container(s).update(resources={"requests": {"BAD RESOURCE!": "1"}}),
            "not a resource name",
        ),
        (
            lambda s: (
                s.update(hostNetwork=True),
                container(s).update(ports=[{"containerPort": 80, "hostPort": 8080}]),
            ),
            "hostPort must equal containerPort when hostNetwork is true (got 8080 and 80)",
        ),
        (lambda s: container(s).update(ports=[{"containerPort": 1, "hostPort": -1}]), "hostPort"),
        (lambda s: container(s).update(ports=[{"containerPort": 1, "protocol": "tcp"}]), "'TCP'"),
    ]
    for change, message in cases:
        with pytest.raises(JobInvalid, match=re.escape(message)):
            parse_job(job_with(change))
    # What the apiserver takes still passes: 1.32's relaxed env names, a toleration of all.
    fine = job_with(
        lambda s: (
            container(s).update(env=[{"name": "1.weird-but:ok", "value": "1"}]),
            s.update(tolerations=[{"operator": "Exists"}], hostNetwork=True),
            container(s).update(
                ports=[
                    {"containerPort": 80, "hostPort": 80},
                    {"containerPort": 53, "protocol": "UDP"},
                ]
            ),
        )
    )
    assert parse_job(fine).metadata.name == "pods"


def test_quantities() -> None:
    assert parse_quantity("500m") == Decimal("0.5")
    assert parse_quantity("32Gi") == 32 * 2**30
    assert parse_quantity("1e3") == 1000
    assert parse_quantity(4) == 4
    assert format_quantity(Decimal("0.5")) == "500m"
    assert format_quantity(Decimal(2 * 2**30)) == "2Gi"
    for bad in ("", "1.2.3", "5Xi", "Gi", True, None, "9" * 40):
        with pytest.raises(QuantityError):
            parse_quantity(bad)


def test_a_kind_that_is_not_a_string_is_refused_clearly() -> None:
    doc = jax_job("odd")
    doc["kind"] = ["JAXJob"]
    with pytest.raises(JobInvalid, match="kind: must be a string"):
        parse_job(doc)


def test_a_name_too_long_for_its_services_is_refused_at_admission() -> None:
    # A Service name is a DNS-1035 label (63 characters): "<name>-worker-<index>" must fit,
    # for the highest index; upstream lets the job in and fails when creating the Service.
    fits = "a" * (63 - len("-worker-9"))
    parse_job(jax_job(fits, workers=10))
    with pytest.raises(JobInvalid) as caught:
        parse_job(jax_job(fits, workers=11))
    message = str(caught.value)
    assert "metadata.name: too long for 11 Worker replica(s)" in message
    assert f"'{fits}-worker-10' has 64 characters" in message
    # MPIJob makes no Services: its pods' names may be longer.
    mpi = yaml.safe_load((DATA / "mpi-pi.yaml").read_text())
    mpi["metadata"]["name"] = "m" * 60
    mpi["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 12
    assert parse_job(mpi).metadata.name == "m" * 60


def test_pod_requests_count_init_containers_and_sidecars_as_the_scheduler_does() -> None:
    doc = jax_job("side", cpu="3")
    spec = doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["initContainers"] = [
        {"name": "fetch", "image": "x", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}},
        {
            "name": "proxy",
            "image": "x",
            "restartPolicy": "Always",
            "resources": {"requests": {"cpu": "1500m"}},
        },
        {"name": "warm", "image": "x", "resources": {"requests": {"cpu": "3"}}},
    ]
    requests = parse_job(doc).replica_specs["Worker"].template.spec.total_requests()
    # containers 3 + sidecar 1.5 = 4.5; "warm" runs beside the sidecar: 3 + 1.5 = 4.5;
    # "fetch" before it: 2. Memory: the largest init container, 4Gi, over the main's 1Gi.
    assert requests == {"cpu": Decimal("4.5"), "memory": Decimal(4 * 2**30)}


def test_resources_the_apiserver_would_refuse_are_refused_at_submission() -> None:
    def with_resources(resources: dict[str, Any]) -> dict[str, Any]:
        doc = jax_job("res")
        doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
            "resources"
        ] = resources
        return doc

    refused = [
        ({"requests": {"cpu": "4"}, "limits": {"cpu": "2"}}, "requests.cpu (4) is more than"),
        ({"requests": {"nvidia.com/gpu": "1"}}, "needs limits.nvidia.com/gpu equal"),
        (
            {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
            "cannot be overcommitted",
        ),
        ({"limits": {"example.com/fpga": "0.5"}}, "is a whole number (got 0.5)"),
    ]
    for resources, expected in refused:
        with pytest.raises(JobInvalid) as caught:
            parse_job(with_resources(resources))
        assert expected in str(caught.value), resources
    # What users write for GPUs (limits only, or equal requests) and for cpu/memory stays fine.
    for resources in (
        {"limits": {"nvidia.com/gpu": "2"}},
        {"requests": {"nvidia.com/gpu": "2", "cpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
        {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2"}},
        {"requests": {"hugepages-2Mi": "1.5Gi"}, "limits": {"hugepages-2Mi": "1.5Gi"}},
    ):
        parse_job(with_resources(resources))


def test_a_refused_value_is_named_once() -> None:
    job = jax_job("named", workers=1)
    container = job["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "A=B", "value": "1"}]
    with pytest.raises(JobInvalid) as refused:
        parse_job(job)
    assert str(refused.value).count("(got ") == 1, str(refused.value)
    container["env"] = [{"name": 7, "value": "1"}]  # pydantic's own message: the value added
    with pytest.raises(JobInvalid, match=r"\(got 7\)"):
        parse_job(job)
