"""The job documents the benches submit: JAXJobs of identical workers, as from a template."""

from __future__ import annotations

from typing import Any


def jax_job(name: str, replicas: int, cpu: str, memory: str) -> dict[str, Any]:
    """A JAXJob for trainhub of `replicas` workers, each requesting `cpu` and `memory`."""
    container = {
        "name": "jax",
        "image": "bench/jax:1",
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "JAXJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runPolicy": {"managedBy": "trainhub.io/dispatcher"},
            "jaxReplicaSpecs": {
                "Worker": {"replicas": replicas, "template": {"spec": {"containers": [container]}}}
            },
        },
    }
