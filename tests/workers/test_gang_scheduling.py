"""PodGroups as the Training Operator v1.9 writes them, for Volcano and for scheduler-plugins:
minMember, minResources (given or computed), queue, priorityClassName, scheduleTimeoutSeconds,
and what each pod carries to join its group."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from schemas.job_parsing import parse_job
from trainhub.cli import app
from trainhub.settings import load_settings
from workers.gang_scheduling import (
    SCHEDULER_PLUGINS_GROUP_LABEL,
    VOLCANO_GROUP_ANNOTATION,
    VOLCANO_TASK_ANNOTATION,
    GangScheduling,
    same_spec,
)
from workers.rendering import LABEL_JOB_UID, render_job

PLUGINS = GangScheduling("scheduler-plugins", "scheduler-plugins-scheduler")
VOLCANO = GangScheduling("volcano", "volcano")


def _container(resources: dict[str, Any] | None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "pytorch", "image": "example/train:1"}
    if resources is not None:
        container["resources"] = resources
    return container


def pytorch(
    *,
    workers: int = 3,
    policy: dict[str, Any] | None = None,
    master: dict[str, Any] | None = None,
    worker: dict[str, Any] | None = None,
    master_extra: dict[str, Any] | None = None,
    worker_extra: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    run_policy = {"schedulingPolicy": policy} if policy is not None else {}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "gang", "namespace": "team-a", "annotations": annotations or {}},
        "spec": {
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [_container(master)],
                            **(master_extra or {}),
                        }
                    },
                },
                "Worker": {
                    "replicas": workers,
                    "template": {
                        "spec": {
                            "containers": [_container(worker)],
                            **(worker_extra or {}),
                        }
                    },
                },
            },
        },
    }


def group_of(document: dict[str, Any], gang: GangScheduling = PLUGINS) -> Any:
    rendered = render_job(parse_job(document), gang=gang)
    assert rendered.pod_group is not None
    return rendered.pod_group


CPU2 = {"requests": {"cpu": "2", "memory": "4Gi"}}


def test_scheduler_plugins_group_defaults_to_every_replica() -> None:
    manifest = group_of(pytorch(master=CPU2, worker=CPU2)).manifest()
    assert manifest["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert manifest["kind"] == "PodGroup"
    assert manifest["metadata"]["name"] == "gang"
    assert manifest["metadata"]["namespace"] == "team-a"
    assert manifest["spec"] == {"minMember": 4, "minResources": {"cpu": "8", "memory": "16Gi"}}


def test_volcano_group_has_the_default_queue_and_always_min_resources() -> None:
    manifest = group_of(pytorch(), VOLCANO).manifest()
    assert manifest["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert manifest["spec"] == {"minMember": 4, "queue": "default", "minResources": {}}


def test_scheduling_policy_fields_go_where_each_scheduler_takes_them() -> None:
    policy = {
        "minAvailable": 2,
        "queue": "research",
        "priorityClass": "high",
        "scheduleTimeoutSeconds": 90,
        "minResources": {"cpu": "3", "nvidia.com/gpu": "2"},
    }
    document = pytorch(policy=policy, master=CPU2, worker=CPU2)
    assert group_of(document).manifest()["spec"] == {
        "minMember": 2,
        "minResources": {"cpu": "3", "nvidia.com/gpu": "2"},
        "scheduleTimeoutSeconds": 90,
    }
    assert group_of(document, VOLCANO).manifest()["spec"] == {
        "minMember": 2,
        "queue": "research",
        "priorityClassName": "high",
        "minResources": {"cpu": "3", "nvidia.com/gpu": "2"},
    }


def test_computed_min_resources_count_the_first_min_available_pods() -> None:
    worker = {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}}
    document = pytorch(policy={"minAvailable": 3}, master=CPU2, worker=worker)
    # Master first (the job's order), then two workers; requests win over limits.
    assert group_of(document).resources() == {"cpu": Decimal(3), "memory": Decimal(4 * 2**30)}


def test_limits_count_only_for_a_container_without_requests() -> None:
    document = pytorch(workers=1, master={"limits": {"cpu": "1", "memory": "1Gi"}}, worker=None)
    assert group_of(document).manifest()["spec"]["minResources"] == {"cpu": "1", "memory": "1Gi"}


def test_min_member_zero_is_left_out_as_upstream_omits_it() -> None:
    spec = group_of(pytorch(policy={"minAvailable": 0}, master=CPU2)).manifest()["spec"]
    assert "minMember" not in spec
    assert "minResources" not in spec  # scheduler-plugins omits an empty list


def test_priority_classes_order_the_replica_types() -> None:
    document = pytorch(
        policy={"minAvailable": 2},
        master=CPU2,
        worker={"requests": {"cpu": "1"}},
        master_extra={"priorityClassName": "low"},
        worker_extra={"priorityClassName": "high"},
    )
    group = group_of(document)
    assert group.priority_classes() == {"low", "high"}
    assert group.resources({"high": 1000, "low": 10}) == {"cpu": Decimal(2)}
    # Unknown classes count 0: the job's order decides.
    assert group.resources({}) == {"cpu": Decimal(3), "memory": Decimal(4 * 2**30)}


def test_no_priority_lookup_when_every_pod_counts_or_resources_are_given() -> None:
    extra = {"priorityClassName": "high"}
    assert group_of(pytorch(worker_extra=extra)).priority_classes() == set()
    given = pytorch(policy={"minAvailable": 1, "minResources": {"cpu": "1"}}, worker_extra=extra)
    assert group_of(given).priority_classes() == set()


def test_group_carries_the_job_annotations_and_our_labels() -> None:
    rendered = render_job(parse_job(pytorch(annotations={"team": "vision"})), gang=PLUGINS)
    assert rendered.pod_group is not None
    metadata = rendered.pod_group.manifest()["metadata"]
    assert metadata["annotations"] == {"team": "vision"}
    assert metadata["labels"][LABEL_JOB_UID] == rendered.job.uid
    assert rendered.manifests()[0]["kind"] == "PodGroup"  # made before anything else


def test_pods_join_the_scheduler_plugins_group() -> None:
    rendered = render_job(parse_job(pytorch()), gang=PLUGINS)
    for pod in rendered.pods:
        manifest = pod.manifest()
        assert manifest["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert manifest["metadata"]["labels"][SCHEDULER_PLUGINS_GROUP_LABEL] == "gang"
        assert VOLCANO_GROUP_ANNOTATION not in manifest["metadata"]["annotations"]


def test_pods_join_the_volcano_group_with_their_task() -> None:
    rendered = render_job(parse_job(pytorch(workers=1)), gang=VOLCANO)
    tasks = {}
    for pod in rendered.pods:
        annotations = pod.manifest()["metadata"]["annotations"]
        assert annotations[VOLCANO_GROUP_ANNOTATION] == "gang"
        tasks[pod.name] = annotations[VOLCANO_TASK_ANNOTATION]
        assert pod.manifest()["spec"]["schedulerName"] == "volcano"
        assert SCHEDULER_PLUGINS_GROUP_LABEL not in pod.labels
    assert tasks == {"gang-master-0": "master", "gang-worker-0": "worker"}


def test_a_template_s_own_scheduler_is_kept() -> None:
    document = pytorch(worker_extra={"schedulerName": "my-scheduler"})
    rendered = render_job(parse_job(document), gang=PLUGINS)
    names = {p.replica_type: p.manifest()["spec"]["schedulerName"] for p in rendered.pods}
    assert names == {"Master": "scheduler-plugins-scheduler", "Worker": "my-scheduler"}
    assert all(SCHEDULER_PLUGINS_GROUP_LABEL in p.labels for p in rendered.pods)


def test_without_a_gang_scheduler_nothing_changes() -> None:
    rendered = render_job(parse_job(pytorch()))
    assert rendered.pod_group is None
    assert all("schedulerName" not in p.manifest()["spec"] for p in rendered.pods)


def test_volcano_keeps_the_queue_it_finds() -> None:
    group = group_of(pytorch(policy={"queue": "new"}), VOLCANO)
    assert group.spec(existing={"queue": "old"})["queue"] == "old"
    assert group.spec(existing={})["queue"] == "new"


def test_same_spec_compares_quantities_by_value() -> None:
    wanted = {"minMember": 2, "minResources": {"memory": "1Gi", "cpu": "1"}}
    assert same_spec(wanted, {"minMember": 2, "minResources": {"memory": "1024Mi", "cpu": "1000m"}})
    assert not same_spec(wanted, {"minMember": 3, "minResources": {"memory": "1Gi", "cpu": "1"}})
    assert same_spec({"minResources": {}}, {})


def test_mpi_launcher_and_workers_form_one_gang() -> None:
    document = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": {"name": "mpi"},
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {"template": {"spec": {"containers": [_container(CPU2)]}}},
                "Worker": {
                    "replicas": 2,
                    "template": {"spec": {"containers": [_container(CPU2)]}},
                },
            }
        },
    }
    rendered = render_job(parse_job(document), gang=PLUGINS)
    assert rendered.pod_group is not None
    assert rendered.pod_group.manifest()["spec"]["minMember"] == 3
    assert all(p.labels[SCHEDULER_PLUGINS_GROUP_LABEL] == "mpi" for p in rendered.pods)


@pytest.mark.parametrize(
    ("scheduler", "name", "expected"),
    [
        ("scheduler-plugins", None, PLUGINS),
        ("scheduler-plugins", "coscheduler", GangScheduling("scheduler-plugins", "coscheduler")),
        ("volcano", None, VOLCANO),
        (None, None, None),
    ],
)
def test_settings_name_the_gang_scheduler(
    scheduler: str | None, name: str | None, expected: GangScheduling | None
) -> None:
    settings = load_settings(gang_scheduler=scheduler, gang_scheduler_name=name)
    assert settings.worker_config("east").gang_scheduling == expected


def test_unknown_gang_schedulers_are_refused() -> None:
    with pytest.raises(ValueError, match="gang_scheduler"):
        load_settings(gang_scheduler="kueue")
    with pytest.raises(ValueError, match="needs --gang-scheduler"):
        GangScheduling.of(None, "coscheduler")


def test_render_shows_the_pod_group(tmp_path: Any) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(pytorch(policy={"minAvailable": 2})))
    result = CliRunner().invoke(app, ["render", str(path), "--gang-scheduler", "volcano"])
    assert result.exit_code == 0, result.output
    documents = list(yaml.safe_load_all(result.output))
    objects = documents[0] if len(documents) == 1 else documents
    group = next(o for o in objects if o["kind"] == "PodGroup")
    assert group["spec"]["minMember"] == 2
    refused = CliRunner().invoke(app, ["render", str(path), "--gang-scheduler", "yunikorn"])
    assert refused.exit_code == 2


def test_up_refuses_a_gang_scheduler_without_real_clusters() -> None:
    result = CliRunner().invoke(app, ["up", "--gang-scheduler", "volcano"])
    assert result.exit_code == 2
    assert "--sandbox" in result.output
