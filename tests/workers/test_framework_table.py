"""Job kinds are listed once, in the adapters table: each adapter takes its kind, default
container and port from its schema class, and the kube watch's fallback containers from it."""

from __future__ import annotations

import typing

from schemas.kubeflow import AnyJob
from workers.backends.kube_watch import KNOWN_MAIN_CONTAINERS, main_exit_code
from workers.frameworks import ADAPTERS


def test_every_schema_kind_has_one_adapter_named_after_its_schema() -> None:
    schemas = typing.get_args(AnyJob)
    assert {adapter.schema for adapter in ADAPTERS.values()} == set(schemas)
    for kind, adapter in ADAPTERS.items():
        assert kind == adapter.kind == adapter.schema.__name__
        assert adapter.default_container == adapter.schema.DEFAULT_CONTAINER
        assert (adapter.port_name, adapter.default_port) == (
            adapter.schema.PORT_NAME,
            adapter.schema.DEFAULT_PORT,
        )


def test_the_kube_watch_knows_every_kinds_default_container() -> None:
    assert set(KNOWN_MAIN_CONTAINERS) == {a.default_container for a in ADAPTERS.values()}
    for container in KNOWN_MAIN_CONTAINERS:
        pod = {
            "spec": {"containers": [{"name": "sidecar"}, {"name": container}]},
            "status": {
                "containerStatuses": [
                    {"name": "sidecar", "state": {"terminated": {"exitCode": 1}}},
                    {"name": container, "state": {"terminated": {"exitCode": 3}}},
                ]
            },
        }
        assert main_exit_code(pod) == 3
