"""Errors raised by the sandbox: the real Kafka broker and Kubernetes control planes."""


class SandboxError(RuntimeError):
    """A sandbox service could not be built, started or stopped."""
