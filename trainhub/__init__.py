"""trainhub: dispatch Kubeflow training jobs across Kubernetes clusters over an event bus.

`TrainHubClient` (blocking) and `AsyncTrainHubClient` are the Python SDK."""

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

__all__ = [
    "AsyncTrainHubClient",
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
]
