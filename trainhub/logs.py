"""Structured logs: every line carries the job uid, cluster and event id when known."""

from __future__ import annotations

import logging
import sys

_CONTEXT = ("job", "cluster", "event", "topic", "offset", "reason", "backend")


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
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class ShownAsStatus(logging.Filter):
    """For a console that prints every status (`trainhub up`): drops the hub's warning about
    a submission it rejected, and that submission's dead letter on the jobs topic, which the
    job's Rejected line already says (three lines for one bad job). `-v` keeps them."""

    def __init__(self, jobs_topic: str) -> None:
        super().__init__()
        self.jobs_topic = jobs_topic

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "dispatcher.hub" and str(record.msg).startswith("rejected invalid job"):
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
