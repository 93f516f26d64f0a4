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
