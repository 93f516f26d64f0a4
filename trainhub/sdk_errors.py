"""What the SDK raises; every error is a `TrainHubError`, a `RuntimeError` as upstream's
TrainingClient raises (timeouts are `TimeoutError`s too), so its callers' handlers catch them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainhub.sdk_view import TrainHubJob


class TrainHubError(RuntimeError):
    """Base of the SDK's errors."""


class ClientClosedError(TrainHubError):
    """The blocking client was closed (before or during the call)."""


class JobNotFoundError(TrainHubError, LookupError):
    """No job of that name (or uid) is on the status topic."""


class RuntimeNotFoundError(TrainHubError, LookupError):
    """No runtime of that kind, namespace and name was applied on the bus."""


class JobExistsError(TrainHubError):
    """The job exists already (and is not deleted): delete it to run it again."""


class JobUpdateError(TrainHubError, ValueError):
    """The update cannot apply to the job where it stands (finished, running with other
    changes than `runPolicy.suspend`, another kind or manager); the job is left as it was."""


class JobFailedError(TrainHubError):
    """The job reached a final phase other than the one waited for (Failed, Rejected, ...)."""

    def __init__(self, message: str, job: TrainHubJob) -> None:
        super().__init__(message)
        self.job = job


class JobTimeoutError(TrainHubError, TimeoutError):
    """The job did not reach the expected conditions in time."""

    def __init__(self, message: str, job: TrainHubJob | None) -> None:
        super().__init__(message)
        self.job = job


class LogsUnavailableError(TrainHubError):
    """The job's logs cannot be read (not placed yet, or its worker did not answer)."""


def looked_for(name: str, namespace: str) -> str:
    """How a not-found error names the job a lookup of `name` searched for: a uid or
    NAMESPACE/NAME as given, a bare NAME in `namespace` (or taken as a uid)."""
    if "/" in name:
        return repr(name)
    return f"'{namespace}/{name}' (nor of uid {name!r})"
