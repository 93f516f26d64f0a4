"""A Kubeflow `TrainingClient` script (kubeflow-training 1.9, used as its docs and examples use
it), changed only in its import and in the client's construction (the `client` fixture: over
the embedded system's in-memory bus, `local` backend, so the functions really run).

What upstream's script would have read instead:

    from kubeflow.training import (KubeflowOrgV1PaddleJob, ..., TrainingClient, V1ObjectMeta)
    client = TrainingClient(namespace="default")
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bus.memory import MemoryBus
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.settings import TrainhubSettings
from trainhub.training_client import (
    KubeflowOrgV1PaddleJob,
    KubeflowOrgV1PaddleJobSpec,
    KubeflowOrgV1PyTorchJob,
    KubeflowOrgV1ReplicaSpec,
    KubeflowOrgV1RunPolicy,
    KubeflowOrgV1TFJob,
    TrainingClient,
    V1Container,
    V1DeleteOptions,
    V1ObjectMeta,
    V1PodSpec,
    V1PodTemplateSpec,
    V1Preconditions,
)
from workers.cluster_spec import parse_cluster_spec

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "default"


async def _embedded(bus: MemoryBus, logs: Path) -> Embedded:
    options = EmbeddedOptions(
        clusters=[parse_cluster_spec("solo:cpu=16,memory=32Gi")],
        backend="local",
        heartbeat_interval=0.2,
        logs_dir=logs,
        workdir=ROOT,
    )
    return await Embedded(options, bus=bus).__aenter__()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TrainingClient]:
    bus = MemoryBus()
    training = TrainingClient(settings=TrainhubSettings(), bus=bus, namespace=NAMESPACE)
    system = training.hub.run_on_loop(_embedded(bus, tmp_path))
    try:
        yield training
    finally:
        training.hub.run_on_loop(training.hub.aio.close())
        training.hub.run_on_loop(system.__aexit__(None, None, None))
        training.close()


# -- the script ------------------------------------------------------------------------------


def train_func(parameters: dict[str, float]) -> None:
    import os

    print("lr", parameters["lr"])
    print("rank of", os.environ.get("HOSTNAME", "?"))


def hello() -> None:
    print("hello from a function")


def sleeper() -> None:
    import time

    time.sleep(30)


def paddle_job(name: str) -> KubeflowOrgV1PaddleJob:
    container = V1Container(
        name="paddle",
        image="docker.io/paddlepaddle/paddle:2.4.0rc0-cpu",
        command=["python", "-c", "print('paddle worker done')"],
    )
    return KubeflowOrgV1PaddleJob(
        api_version="kubeflow.org/v1",
        kind="PaddleJob",
        metadata=V1ObjectMeta(name=name, namespace=NAMESPACE),
        spec=KubeflowOrgV1PaddleJobSpec(
            run_policy=KubeflowOrgV1RunPolicy(clean_pod_policy="None"),
            paddle_replica_specs={
                "Worker": KubeflowOrgV1ReplicaSpec(
                    replicas=2,
                    restart_policy="OnFailure",
                    template=V1PodTemplateSpec(spec=V1PodSpec(containers=[container])),
                )
            },
        ),
    )


PYTORCH_YAML = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: pytorch-simple
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: pytorch
              image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
              command: ["python", "-c", "print('epoch 1 loss 0.5')"]
"""


def test_a_job_object_and_a_yaml_document(client: TrainingClient) -> None:
    client.create_job(paddle_job("paddle-simple"))
    job = client.get_job("paddle-simple", job_kind="PaddleJob")
    assert isinstance(job, KubeflowOrgV1PaddleJob)
    assert job.metadata.name == "paddle-simple" and job.metadata.namespace == NAMESPACE
    assert job.spec.paddle_replica_specs["Worker"].replicas == 2
    container = job.spec.paddle_replica_specs["Worker"].template.spec.containers[0]
    assert container.command == ["python", "-c", "print('paddle worker done')"]
    assert job.to_dict()["spec"]["paddle_replica_specs"]["Worker"]["restart_policy"] == "OnFailure"
    assert job.spec.run_policy.managed_by == "trainhub.io/dispatcher"

    # The positional call: name, namespace, job_kind, expected_conditions, wait_timeout.
    done = client.wait_for_job_conditions(
        "paddle-simple", NAMESPACE, "PaddleJob", {"Succeeded"}, 60
    )
    assert done.metadata.name == "paddle-simple"
    assert client.is_job_succeeded(job=done, job_kind="PaddleJob")
    assert client.is_job_created("paddle-simple", job_kind="PaddleJob")
    assert not client.is_job_failed("paddle-simple", NAMESPACE, "PaddleJob")
    types = [c.type for c in client.get_job_conditions("paddle-simple", job_kind="PaddleJob")]
    assert "Succeeded" in types
    assert sorted(client.get_job_pod_names("paddle-simple")) == [
        "paddle-simple-worker-0",
        "paddle-simple-worker-1",
    ]

    client.create_job(yaml.safe_load(PYTORCH_YAML))
    client.wait_for_job_conditions("pytorch-simple", wait_timeout=60, polling_interval=1)
    logs, events = client.get_job_logs("pytorch-simple")
    assert logs == {"pytorch-simple-master-0": "epoch 1 loss 0.5\n"} and events == {}
    assert [j.metadata.name for j in client.list_jobs()] == ["pytorch-simple"]
    assert [j.metadata.name for j in client.list_jobs(job_kind="PaddleJob")] == ["paddle-simple"]
    assert isinstance(client.list_jobs()[0], KubeflowOrgV1PyTorchJob)


def test_functions_as_pytorch_and_tf_jobs_and_their_logs(client: TrainingClient) -> None:
    client.create_job(name="hello", train_func=hello)  # a PyTorchJob, as upstream's
    client.create_job(
        name="tf-two",
        job_kind="TFJob",
        train_func=train_func,
        parameters={"lr": 0.1},
        num_workers=2,
        resources_per_worker={"cpu": "500m", "memory": "256Mi"},
        env_vars={"EPOCHS": "3"},
    )
    client.create_job(
        name="tf-ps",
        job_kind="TFJob",
        train_func=train_func,
        parameters={"lr": 0.2},
        num_workers=2,
        num_chief_replicas=1,
        num_ps_replicas=1,
    )
    hello_job = client.wait_for_job_conditions("hello", polling_interval=1)
    assert list(hello_job.spec.pytorch_replica_specs) == ["Master"]
    assert hello_job.spec.pytorch_replica_specs["Master"].template.spec.containers[0].image == (
        "docker.io/pytorch/pytorch:2.1.2-cuda11.8-cudnn8-runtime"
    )
    logs, _ = client.get_job_logs("hello")
    assert logs == {"hello-master-0": "hello from a function\n"}

    two = client.wait_for_job_conditions("tf-two", job_kind="TFJob", polling_interval=1)
    assert isinstance(two, KubeflowOrgV1TFJob) and list(two.spec.tf_replica_specs) == ["Worker"]
    worker = two.spec.tf_replica_specs["Worker"]
    assert worker.replicas == 2
    assert worker.template.spec.containers[0].name == "tensorflow"
    assert worker.template.spec.containers[0].resources.limits == {
        "cpu": "500m",
        "memory": "256Mi",
    }
    assert worker.template.metadata.annotations == {"sidecar.istio.io/inject": "false"}
    # Upstream's default: the master pod only (the TFJob's worker 0).
    logs, events = client.get_job_logs("tf-two", job_kind="TFJob")
    assert list(logs) == ["tf-two-worker-0"] and logs["tf-two-worker-0"].startswith("lr 0.1\n")
    assert events == {}
    logs, events = client.get_job_logs("tf-two", job_kind="TFJob", is_master=False, verbose=True)
    assert sorted(logs) == ["tf-two-worker-0", "tf-two-worker-1"]
    assert all(text.startswith("lr 0.1\n") for text in logs.values())
    assert list(events) == ["tfjob/tf-two"] and "Succeeded" in events["tfjob/tf-two"][-1]
    logs, _ = client.get_job_logs("tf-two", NAMESPACE, "TFJob", False, "worker", 1)
    assert list(logs) == ["tf-two-worker-1"]

    ps = client.wait_for_job_conditions("tf-ps", job_kind="TFJob", polling_interval=1)
    assert list(ps.spec.tf_replica_specs) == ["Chief", "PS", "Worker"]
    assert [r.replicas for r in ps.spec.tf_replica_specs.values()] == [1, 1, 2]
    assert client.get_job_pod_names("tf-ps", is_master=True) == ["tf-ps-chief-0"]
    assert client.get_job_pod_names("tf-ps", replica_type="ps") == ["tf-ps-ps-0"]
    logs, _ = client.get_job_logs("tf-ps", job_kind="TFJob", follow=True)
    assert logs["tf-ps-chief-0"].startswith("lr 0.2\n")


def test_distributed_pytorch_from_a_function_and_deleting_it(client: TrainingClient) -> None:
    client.create_job(
        name="dist",
        train_func=train_func,
        parameters={"lr": 0.3},
        num_workers=3,
        num_procs_per_worker=2,
        packages_to_install=["numpy"],
    )
    job = client.get_job("dist")
    assert job.spec.nproc_per_node == "2"
    replicas = job.spec.pytorch_replica_specs
    assert {t: r.replicas for t, r in replicas.items()} == {"Master": 1, "Worker": 2}
    script = replicas["Master"].template.spec.containers[0].args[0]
    assert "exec torchrun" in script and "--index-url https://pypi.org/simple numpy" in script

    client.delete_job("dist", delete_options=V1DeleteOptions(dry_run=["All"]))
    assert client.get_job("dist").metadata.name == "dist"
    with pytest.raises(RuntimeError, match="precondition uid"):
        client.delete_job(
            "dist", delete_options=V1DeleteOptions(preconditions=V1Preconditions(uid="x"))
        )
    client.delete_job(
        "dist",
        delete_options=V1DeleteOptions(
            grace_period_seconds=0,
            propagation_policy="Foreground",
            preconditions=V1Preconditions(uid=job.metadata.uid),
        ),
    )
    with pytest.raises(RuntimeError, match="Failed to get PyTorchJob: default/dist"):
        client.get_job("dist")
    with pytest.raises(RuntimeError, match="Failed to delete PyTorchJob: default/dist"):
        client.delete_job("dist")
    assert client.list_jobs() == []


def test_update_resumes_a_held_job(client: TrainingClient) -> None:
    held = yaml.safe_load(PYTORCH_YAML)
    held["metadata"]["name"] = "held"
    held["spec"]["runPolicy"] = {"suspend": True}
    client.create_job(held)
    client.wait_for_job_conditions("held", expected_conditions={"Suspended"}, polling_interval=1)
    job = client.get_job("held")
    job.spec.run_policy.suspend = False
    client.update_job(job, "held")
    assert (
        client.wait_for_job_conditions("held", polling_interval=1).spec.run_policy.suspend is False
    )


def test_the_errors_upstream_raises(client: TrainingClient) -> None:
    with pytest.raises(ValueError, match="Job kind must be one of these"):
        TrainingClient(job_kind="SparkJob", client=client.hub)
    with pytest.raises(ValueError, match="Job kind must be one of these"):
        client.get_job("x", job_kind="SparkJob")
    with pytest.raises(RuntimeError, match="Failed to get PyTorchJob: default/nothing"):
        client.get_job("nothing")
    with pytest.raises(ValueError, match="only `namespace` argument is allowed"):
        client.create_job(paddle_job("x"), name="y")
    with pytest.raises(ValueError, match="Job name must be set"):
        client.create_job(train_func=hello)
    with pytest.raises(ValueError, match="can't be created using function or image"):
        client.create_job(name="p", job_kind="PaddleJob", train_func=hello)
    with pytest.raises(ValueError, match="num_chief_replicas and num_ps_replicas can't be set"):
        client.create_job(name="p", train_func=hello, num_chief_replicas=1)
    with pytest.raises(ValueError, match="num_procs_per_worker can't be set for TFJob"):
        client.create_job(name="t", job_kind="TFJob", train_func=hello, num_procs_per_worker=2)
    with pytest.raises(ValueError, match="At least one Worker"):
        client.create_job(name="p", train_func=hello, num_workers=0)
    with pytest.raises(ValueError, match="Job must be one of these types"):
        client.create_job()
    with pytest.raises(ValueError, match="must be subset of"):
        client.wait_for_job_conditions("x", expected_conditions={"Finished"})
    assert client.get_job_pods("nothing") == []

    failing = yaml.safe_load(PYTORCH_YAML)
    failing["metadata"]["name"] = "failing"
    master = failing["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    master["containers"][0]["command"] = ["python", "-c", "raise SystemExit(3)"]
    client.create_job(failing)
    with pytest.raises(RuntimeError, match="PyTorchJob default/failing is Failed"):
        client.wait_for_job_conditions("failing", polling_interval=1)
    assert client.is_job_failed("failing")
    with pytest.raises(RuntimeError, match="Failed to create PyTorchJob: default/failing"):
        client.create_job(failing)  # the name is taken until it is deleted
    with pytest.raises(RuntimeError, match="is a PyTorchJob"):
        client.get_job("failing", job_kind="TFJob")

    client.create_job(name="slow", train_func=sleeper)
    client.wait_for_job_conditions("slow", expected_conditions={"Running"}, polling_interval=1)
    assert client.is_job_running("slow")
    with pytest.raises(TimeoutError, match="Timeout waiting for PyTorchJob: default/slow"):
        client.wait_for_job_conditions("slow", wait_timeout=1, polling_interval=1)
    client.delete_job("slow")
