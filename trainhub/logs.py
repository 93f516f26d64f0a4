"""Structured logs: every line carries the job uid, cluster and event id when known."""

from __future__ import annotations

import logging
import sys
import time

_CONTEXT = (
    "job",
    "cluster",
    "event",
    "topic",
    "offset",
    "reason",
    "backend",
    "bootstrap",
    "placement",
)
"""The `extra` fields a log line shows, as key=value after the message."""


class ContextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        context = " ".join(
            f"{k}={getattr(record, k)}" for k in _CONTEXT if getattr(record, k, None) is not None
        )
        return f"{base} {context}" if context else base


def setup_logging(level: int = logging.WARNING) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ContextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RetriedByKafkaClient())
    handler.addFilter(OncePerInterval())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


_RETRIED_BY_CLIENT = (
    "NotLeaderForPartitionError",
    "LeaderNotAvailableError",
    "GroupCoordinatorNotAvailableError",
    "NotCoordinatorForGroupError",
    "CoordinatorLoadInProgressError",
)
"""aiokafka errors that only say a partition's leader or a group's coordinator is still being
elected (every topic just created, every broker restart): aiokafka retries them itself."""


class RetriedByKafkaClient(logging.Filter):
    """aiokafka logs the errors of `_RETRIED_BY_CLIENT` as ERROR (or WARNING), though it
    retries them and carries on: on every fresh start a newcomer read them as failures.
    They are shown at debug level (`-vv`) instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("aiokafka") or record.levelno <= logging.DEBUG:
            return True
        message = record.getMessage()
        if not any(name in message for name in _RETRIED_BY_CLIENT):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)


class OncePerInterval(logging.Filter):
    """aiokafka logs an error for every connection attempt, every few milliseconds while the
    broker is down (12,000 lines a minute): each of its messages passes once per `interval`
    seconds, the next one saying how many were left out meanwhile."""

    def __init__(self, interval: float = 10.0, prefix: str = "aiokafka") -> None:
        super().__init__()
        self.interval = interval
        self.prefix = prefix
        self._last: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.prefix):
            return True
        key = (record.name, record.getMessage())
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last[0] < self.interval:
            self._last[key] = (last[0], last[1] + 1)
            return False
        if len(self._last) > 1000:
            self._last.clear()  # messages naming ever new things must not pile up
        self._last[key] = (now, 0)
        if last is not None and last[1]:
            record.msg = f"{record.getMessage()} (and {last[1]} times more in {now - last[0]:.0f}s)"
            record.args = None
        return True


class ShownAsStatus(logging.Filter):
    """For a console that prints every status (`trainhub up`): drops the hub's warning about
    a submission it rejected, and that submission's dead letter on the jobs topic, which the
    job's Rejected line already says (three lines for one bad job). `-v` keeps them."""

    def __init__(self, jobs_topic: str) -> None:
        super().__init__()
        self.jobs_topic = jobs_topic

    def filter(self, record: logging.LogRecord) -> bool:
        # Whichever of the hub's modules rejects it (the intake, since the hub was split).
        hub = record.name == "dispatcher" or record.name.startswith("dispatcher.")
        if hub and str(record.msg).startswith("rejected invalid job"):
            return False
        return not (
            record.name == "bus.dead_letters" and getattr(record, "topic", None) == self.jobs_topic
        )


def quiet_echoes(jobs_topic: str) -> None:
    """Install `ShownAsStatus` on the root handlers, unless logging is verbose."""
    root = logging.getLogger()
    if root.getEffectiveLevel() < logging.WARNING:
        return
    for handler in root.handlers:
        handler.addFilter(ShownAsStatus(jobs_topic))
