"""trainhub: dispatch Kubeflow training jobs across Kubernetes clusters over an event bus.

`TrainHubClient` (blocking) and `AsyncTrainHubClient` are the Python SDK; `TrainingClient` is
Kubeflow's (kubeflow-training 1.9) over it, and `TrainerClient` Kubeflow Trainer v2's."""

# The names are loaded on first use: `import trainhub` stays cheap, so the `trainhub` command
# (trainhub.entry, inside this package) starts at once and can answer a SIGTERM cleanly.
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bus.base import BusError
    from trainhub.sdk import AsyncTrainHubClient, TrainHubClient
    from trainhub.sdk_errors import (
        ClientClosedError,
        JobExistsError,
        JobFailedError,
        JobNotFoundError,
        JobTimeoutError,
        JobUpdateError,
        LogsUnavailableError,
        TrainHubError,
    )
    from trainhub.sdk_pods import JobPod, JobPodsUnknownError
    from trainhub.sdk_stream import StatusEvent
    from trainhub.sdk_view import TrainHubJob
    from trainhub.trainer_client import TrainerClient
    from trainhub.training_client import TrainingClient

_HOMES = {
    "BusError": "bus.base",
    "AsyncTrainHubClient": "trainhub.sdk",
    "TrainHubClient": "trainhub.sdk",
    "ClientClosedError": "trainhub.sdk_errors",
    "JobExistsError": "trainhub.sdk_errors",
    "JobFailedError": "trainhub.sdk_errors",
    "JobNotFoundError": "trainhub.sdk_errors",
    "JobTimeoutError": "trainhub.sdk_errors",
    "JobUpdateError": "trainhub.sdk_errors",
    "LogsUnavailableError": "trainhub.sdk_errors",
    "TrainHubError": "trainhub.sdk_errors",
    "JobPod": "trainhub.sdk_pods",
    "JobPodsUnknownError": "trainhub.sdk_pods",
    "StatusEvent": "trainhub.sdk_stream",
    "TrainHubJob": "trainhub.sdk_view",
    "TrainerClient": "trainhub.trainer_client",
    "TrainingClient": "trainhub.training_client",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'trainhub' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "AsyncTrainHubClient",
    "BusError",
    "ClientClosedError",
    "JobExistsError",
    "JobFailedError",
    "JobNotFoundError",
    "JobPod",
    "JobPodsUnknownError",
    "JobTimeoutError",
    "JobUpdateError",
    "LogsUnavailableError",
    "StatusEvent",
    "TrainHubClient",
    "TrainHubError",
    "TrainHubJob",
    "TrainerClient",
    "TrainingClient",
]
