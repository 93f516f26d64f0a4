"""Which refusals of a cluster fail a job and which only postpone it."""

from __future__ import annotations

from workers.backends.base import BackendError
from workers.backends.kube_client import (
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeNotFound,
    KubeUnavailable,
    classify,
)


def test_kube_refusals_are_backend_errors_and_only_outages_are_transient() -> None:
    assert issubclass(KubeError, BackendError)
    for status, kind in ((403, KubeForbidden), (404, KubeNotFound), (409, KubeConflict)):
        error = classify(
            status, b"{}", who="w", verb="create", resource="pods", namespace="default"
        )
        assert isinstance(error, kind) and not error.transient
    invalid = classify(
        422,
        b'{"reason": "Invalid", "message": "spec.containers[0].image: Required value"}',
        who="w",
        verb="create",
        resource="pods",
        namespace="default",
    )
    assert type(invalid) is KubeError and not invalid.transient
    assert "Required value" in str(invalid)
    for status in (429, 500, 503):
        outage = classify(status, b"", who="w", verb="create", resource="pods", namespace=None)
        assert isinstance(outage, KubeUnavailable) and outage.transient
