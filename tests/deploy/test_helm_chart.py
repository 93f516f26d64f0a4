"""The Helm chart: `helm lint` and `helm template` with real helm, and what the rendered objects
say checked against trainhub itself (the settings file loads as TrainhubSettings, the worker
arguments parse as `trainhub worker` flags). The settings names are checked without helm."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from tests.deploy.helm_chart import CHART, CI_VALUES, render, require_helm, run_helm
from trainhub.cli import app
from trainhub.processes import hub_config
from trainhub.settings import TrainhubSettings, load_settings


@pytest.fixture(scope="module")
def helm() -> Path:
    return require_helm()


@pytest.fixture(scope="module")
def objects(helm: Path) -> list[dict[str, Any]]:
    return render(helm, CI_VALUES)


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {[o['metadata']['name'] for o in objects]}"
    return found[0]


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def test_the_values_use_the_settings_own_names() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values["settings"]) <= set(TrainhubSettings.model_fields)
    schema = json.loads((CHART / "values.schema.json").read_text())
    # Every setting but the password (a Secret's business) can be given, and nothing else.
    named = set(schema["properties"]["settings"]["properties"])
    assert named == set(TrainhubSettings.model_fields) - {"sasl_password"}


def test_helm_lint_passes(helm: Path) -> None:
    for args in (
        ["--values", str(CI_VALUES)],
        ["--set", "settings.bootstrap=kafka:9092"],
    ):
        done = run_helm(helm, "lint", "--strict", str(CHART), *args)
        assert done.returncode == 0, done.stdout + done.stderr


def test_everything_the_chart_makes(objects: list[dict[str, Any]]) -> None:
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert kinds == [
        ("ConfigMap", "trainhub-config"),
        ("Deployment", "trainhub-hub"),
        ("Deployment", "trainhub-worker-demo"),
        ("Deployment", "trainhub-worker-east"),
        ("Deployment", "trainhub-worker-west"),
        ("Secret", "trainhub-kafka"),
        ("Service", "trainhub-hub"),
        ("Service", "trainhub-workers"),
        ("ServiceAccount", "trainhub"),
        ("ServiceMonitor", "trainhub"),
    ]


def test_the_settings_file_is_what_trainhub_reads(
    objects: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "trainhub.yaml"
    config.write_text(_one(objects, "ConfigMap", "trainhub-config")["data"]["trainhub.yaml"])
    hub = _container(_one(objects, "Deployment", "trainhub-hub"))
    env = {e["name"]: e for e in hub["env"]}
    assert env["TRAINHUB_CONFIG"]["value"] == f"/etc/trainhub/config/{config.name}"
    password = env["TRAINHUB_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
    secret = _one(objects, "Secret", password["name"])
    monkeypatch.setenv("TRAINHUB_SASL_PASSWORD", secret["stringData"][password["key"]])

    settings = load_settings(config)
    assert settings.bootstrap == "kafka-0.kafka:9092,kafka-1.kafka:9092"
    assert settings.topic_prefix == "ml-prod"
    assert settings.security_protocol == "SASL_PLAINTEXT"
    assert settings.kafka().sasl_password == "not-a-real-password"
    assert "password" not in config.read_text()
    ports = {p["name"]: p["containerPort"] for p in hub["ports"]}
    assert ports == {"metrics": settings.metrics_port}


def _parse_cli(args: list[str]) -> dict[str, Any]:
    """The parameters `trainhub ARGS` would run with: parsed by the real CLI, not run."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    context = typer.Context(group, info_name="trainhub")
    command = group.get_command(context, args[0])
    assert command is not None, args[0]
    return dict(command.make_context(args[0], list(args[1:]), parent=context).params)


def test_the_workers_run_with_their_cluster_s_flags(objects: list[dict[str, Any]]) -> None:
    east = _one(objects, "Deployment", "trainhub-worker-east")
    container = _container(east)
    assert container["command"] == ["trainhub"]
    params = _parse_cli(container["args"])
    assert params["cluster"] == "east"
    assert params["backend"] == "kube"
    assert str(params["kubeconfig"]) == "/etc/trainhub/kubeconfig/config"
    assert params["context"] == "trainhub-worker@east"
    assert list(params["namespace"]) == ["default", "team-a"]
    assert sorted(params["label"]) == ["gpu=h100", "region=eu-west-1"]
    assert (params["weight"], params["cost"]) == (80, 1.5)
    assert list(params["allow"]) == ["hostPath", "privileged"]
    assert params["pod_security"] == "restricted"
    assert (params["gang_scheduler"], params["gang_scheduler_name"]) == (
        "scheduler-plugins",
        "coscheduler",
    )
    assert params["mode"] is None  # settings' (direct)
    assert params["delegate_managed_by"] is None
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["kubeconfig"] == "/etc/trainhub/kubeconfig"
    volumes = {v["name"]: v for v in east["spec"]["template"]["spec"]["volumes"]}
    assert volumes["kubeconfig"]["secret"] == {
        "secretName": "east-kubeconfig",
        "items": [{"key": "config", "path": "config"}],
    }

    # east has its own Kafka identity (so that under ACLs it reads only its assignments).
    assert params["sasl_username"] == "east-worker"
    env = {e["name"]: e for e in container["env"]}
    assert env["TRAINHUB_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "east-kafka",
        "key": "sasl_password",
    }
    assert env["TRAINHUB_CONFIG"]["value"] == "/etc/trainhub/config/trainhub.yaml"

    west = _one(objects, "Deployment", "trainhub-worker-west")
    params = _parse_cli(_container(west)["args"])
    assert params["sasl_username"] is None  # the shared one, from the settings file
    env = {e["name"]: e for e in _container(west)["env"]}
    assert env["TRAINHUB_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "trainhub-kafka"
    assert params["context"] is None  # the kubeconfig's current context
    assert (params["weight"], params["cost"], list(params["allow"] or ())) == (None, None, [])
    assert params["pod_security"] == "baseline"
    assert params["gang_scheduler"] is None  # settings' (none here)
    assert params["mode"] == "delegate"  # its members' Training Operator runs the jobs
    assert params["delegate_managed_by"] == "kubeflow.org/training-operator"
    volumes = {v["name"]: v for v in west["spec"]["template"]["spec"]["volumes"]}
    items = volumes["kubeconfig"]["secret"]["items"]
    assert items == [{"key": "kubeconfig.yaml", "path": "config"}]
    assert _container(west)["resources"]["requests"] == {"cpu": "200m", "memory": "512Mi"}

    demo = _one(objects, "Deployment", "trainhub-worker-demo")
    params = _parse_cli(_container(demo)["args"])
    assert (params["backend"], params["capacity"]) == ("sim", "cpu=8,memory=16Gi,nodes=2")
    assert "kubeconfig" not in {v["name"] for v in demo["spec"]["template"]["spec"]["volumes"]}

    hub = _container(_one(objects, "Deployment", "trainhub-hub"))
    assert hub["args"] == ["hub"]
    # Everything else comes from the settings file: no flag overrides it.
    assert all(value is None for value in _parse_cli(hub["args"]).values())


def test_selectors_and_references_hold_together(objects: list[dict[str, Any]]) -> None:
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    for deployment in deployments:
        spec = deployment["spec"]
        labels = spec["template"]["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= labels.items()
        pod = spec["template"]["spec"]
        assert pod["serviceAccountName"] == "trainhub"
        volumes = {v["name"] for v in pod["volumes"]}
        assert {m["name"] for m in _container(deployment)["volumeMounts"]} <= volumes
    for service in (o for o in objects if o["kind"] == "Service"):
        selected = [
            d
            for d in deployments
            if service["spec"]["selector"].items()
            <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        expected = 1 if service["metadata"]["name"].endswith("-hub") else 3
        assert len(selected) == expected, service["metadata"]["name"]
    monitor = _one(objects, "ServiceMonitor", "trainhub")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    scraped = [
        s
        for s in objects
        if s["kind"] == "Service"
        and monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert len(scraped) == 2
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {"metrics"}


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("settings.sasl_password=oops",), "sasl_password"),
        (("workers[0].name=East_1", "workers[0].kubeconfigSecret=k"), "workers"),
        (
            (
                *("workers[0].name=a", "workers[0].kubeconfigSecret=k"),
                *("workers[1].name=a", "workers[1].kubeconfigSecret=k"),
            ),
            "appears twice",
        ),
        (("workers[0].name=a",), "kubeconfigSecret is required"),
        (("workers[0].name=a", "workers[0].backend=sim"), "capacity is required"),
        (("hub.extraArgs={--metrics-port=9100}",), "set settings.metrics_port instead"),
        (("hub.extraArgs={--sasl-password=hunter2}",), "use saslPassword (a Secret) instead"),
        (
            (
                "workers[0].name=a",
                "workers[0].kubeconfigSecret=k",
                "workers[0].kafka.saslUsername=u",
            ),
            "needs kafka.saslPasswordSecret",
        ),
        (
            ("workers[0].name=a", "workers[0].kubeconfigSecret=k"),
            "set settings.metrics_port instead",
        ),
    ],
    ids=[
        "password-in-configmap",
        "bad-name",
        "duplicate",
        "no-kubeconfig",
        "sim-no-capacity",
        "hub-metrics-port-arg",
        "hub-password-arg",
        "worker-user-without-password",
        "worker-metrics-port-arg",
    ],
)
def test_helm_refuses_values_that_cannot_work(
    helm: Path, sets: tuple[str, ...], message: str
) -> None:
    args = ["template", "trainhub", str(CHART), "--set", "settings.bootstrap=kafka:9092"]
    for item in sets:
        args += ["--set", item]
    if message == "set settings.metrics_port instead" and "workers[0].name=a" in sets:
        args += ["--set-json", 'workers[0].extraArgs=["--metrics-port", "9100"]']
    done = run_helm(helm, *args)
    assert done.returncode != 0
    assert message in done.stderr


def test_bootstrap_is_required(helm: Path) -> None:
    done = run_helm(helm, "template", "trainhub", str(CHART))
    assert done.returncode != 0 and "settings.bootstrap is required" in done.stderr


def test_without_a_metrics_port_the_processes_serve_the_one_the_probes_use(
    helm: Path, tmp_path: Path
) -> None:
    # Unset (null), the processes would start no metrics server at all while the Services
    # and readiness probes still pointed at the chart's default port.
    objects = render(helm, CI_VALUES, sets=("settings.metrics_port=null",))
    config = tmp_path / "trainhub.yaml"
    config.write_text(_one(objects, "ConfigMap", "trainhub-config")["data"]["trainhub.yaml"])
    port = load_settings(config).metrics_port
    assert port is not None
    for name in ("trainhub-hub", "trainhub-worker-east"):
        container = _container(_one(objects, "Deployment", name))
        assert {p["containerPort"] for p in container["ports"]} == {port}


def test_scoring_weights_given_replace_the_default(helm: Path, tmp_path: Path) -> None:
    config = tmp_path / "trainhub.yaml"
    for sets, expected in (
        ((), {"least-allocated": 1.0}),
        (("settings.placement.scoring.most-allocated=1",), {"most-allocated": 1.0}),
    ):
        objects = render(helm, CI_VALUES, sets=sets)
        config.write_text(_one(objects, "ConfigMap", "trainhub-config")["data"]["trainhub.yaml"])
        assert hub_config(load_settings(config)).placement.scoring == expected


def test_a_worker_s_resources_add_to_the_defaults(objects: list[dict[str, Any]]) -> None:
    # The CI values give west only requests: it keeps the default memory limit.
    west = _container(_one(objects, "Deployment", "trainhub-worker-west"))
    assert west["resources"] == {
        "requests": {"cpu": "200m", "memory": "512Mi"},
        "limits": {"memory": "1Gi"},
    }


def test_a_new_chart_managed_password_rolls_the_pods(helm: Path) -> None:
    def checksums(password: str) -> dict[str, str]:
        objects = render(helm, CI_VALUES, sets=(f"saslPassword.value={password}",))
        hub = _one(objects, "Deployment", "trainhub-hub")
        annotations: dict[str, str] = hub["spec"]["template"]["metadata"]["annotations"]
        return annotations

    first, second = checksums("one"), checksums("two")
    assert first["checksum/config"] == second["checksum/config"]
    assert first["checksum/secret"] != second["checksum/secret"]


def test_a_worker_s_own_client_certificate(helm: Path) -> None:
    objects = render(
        helm,
        CI_VALUES,
        sets=("tls.existingSecret=kafka-ca", "workers[1].kafka.tlsSecret=west-tls"),
    )
    west = _one(objects, "Deployment", "trainhub-worker-west")
    container = _container(west)
    params = _parse_cli(container["args"])
    assert (params["ssl_certfile"], params["ssl_keyfile"]) == (
        "/etc/trainhub/worker-tls/tls.crt",
        "/etc/trainhub/worker-tls/tls.key",
    )
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["worker-tls"] == "/etc/trainhub/worker-tls"
    assert mounts["tls"] == "/etc/trainhub/tls"  # the CA stays the shared one
    volumes = {v["name"]: v for v in west["spec"]["template"]["spec"]["volumes"]}
    assert volumes["worker-tls"]["secret"] == {"secretName": "west-tls"}


def test_numbers_in_names_labels_and_cost_stay_what_was_written(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "settings": {"bootstrap": "kafka:9092"},
                "workers": [
                    {
                        "name": "123",  # a DNS label YAML would read as a number unquoted
                        "backend": "sim",
                        "capacity": "cpu=4,memory=8Gi",
                        "labels": {"account": 123456789012, "rack": 1000000, "half": 0.5},
                        "cost": 2500000,
                    },
                    {"name": "on", "backend": "sim", "capacity": "cpu=4,memory=8Gi"},
                ],
            }
        )
    )
    objects = render(helm, values)
    for name in ("123", "on"):
        worker = _one(objects, "Deployment", f"trainhub-worker-{name}")
        pod_labels = worker["spec"]["template"]["metadata"]["labels"]
        for labels in (worker["metadata"]["labels"], worker["spec"]["selector"]["matchLabels"]):
            assert labels["trainhub.io/cluster"] == name == pod_labels["trainhub.io/cluster"]
    params = _parse_cli(_container(_one(objects, "Deployment", "trainhub-worker-123"))["args"])
    assert sorted(params["label"]) == ["account=123456789012", "half=0.5", "rack=1000000"]
    assert params["cost"] == 2500000


def test_a_release_of_workers_only_runs_no_hub(helm: Path) -> None:
    objects = render(helm, CI_VALUES, sets=("hub.enabled=false",))
    hub = [o for o in objects if o["metadata"]["name"].endswith("-hub")]
    assert hub == []
    workers = [o for o in objects if o["kind"] == "Deployment"]
    assert sorted(o["metadata"]["name"] for o in workers) == [
        "trainhub-worker-demo",
        "trainhub-worker-east",
        "trainhub-worker-west",
    ]


def test_a_long_release_name_still_gives_services_valid_names(helm: Path) -> None:
    release = "ml-platform-production-training-dispatcher-euw1a"  # 48: helm allows 53
    done = run_helm(helm, "template", release, str(CHART), "--values", str(CI_VALUES))
    assert done.returncode == 0, done.stderr
    services = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "Service"]
    assert len(services) == 2
    for service in services:
        name = service["metadata"]["name"]
        assert len(name) <= 63 and name.endswith(("-hub", "-workers")), name


def test_a_worker_s_empty_placement_settings_clear_the_defaults(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    defaults = {
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        "podAnnotations": {"team": "platform"},
    }
    cleared: dict[str, Any] = {
        "nodeSelector": {},
        "tolerations": [],
        "affinity": {},
        "podAnnotations": {},
    }
    own = {"nodeSelector": {"pool": "gpu"}}
    values.write_text(
        yaml.safe_dump(
            {
                "settings": {"bootstrap": "kafka:9092"},
                "workerDefaults": defaults,
                "workers": [
                    {"name": "plain", "backend": "sim", "capacity": "cpu=4,memory=8Gi"},
                    {"name": "bare", "backend": "sim", "capacity": "cpu=4", **cleared},
                    {"name": "own", "backend": "sim", "capacity": "cpu=4", **own},
                ],
            }
        )
    )
    objects = render(helm, values)

    def pod(name: str) -> dict[str, Any]:
        template: dict[str, Any] = _one(objects, "Deployment", f"trainhub-worker-{name}")["spec"][
            "template"
        ]
        return template

    plain, bare, mine = pod("plain"), pod("bare"), pod("own")
    assert plain["spec"]["nodeSelector"] == defaults["nodeSelector"]
    assert plain["spec"]["tolerations"] == defaults["tolerations"]
    assert plain["spec"]["affinity"] == defaults["affinity"]
    assert plain["metadata"]["annotations"]["team"] == "platform"
    for key in ("nodeSelector", "tolerations", "affinity"):
        assert key not in bare["spec"], bare["spec"]
    assert "team" not in bare["metadata"]["annotations"]
    assert mine["spec"]["nodeSelector"] == {"pool": "gpu"}  # replaced, not merged
    assert mine["spec"]["tolerations"] == defaults["tolerations"]


def test_two_hubs_run_by_default_and_a_rollout_keeps_one_ready(
    objects: list[dict[str, Any]],
) -> None:
    hub = _one(objects, "Deployment", "trainhub-hub")
    assert hub["spec"]["replicas"] == 2
    assert hub["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
