"""The kubelet's CrashLoopBackOff, for backends that restart a pod by creating it again
under its name (local, sim): without it a pod that fails at once restarted thousands of
times a minute and kept every core busy."""

from __future__ import annotations

import time
from collections.abc import Callable

INITIAL = 1.0
"""Seconds before the second re-creation; the first is immediate (a kubelet waits 10 s:
shorter here, where a restart loop is a developer's edit-and-run loop)."""
CAP = 30.0
RESET_AFTER = 600.0
"""A run this long (as the kubelet's 10 minutes) clears the pod's count."""


class CrashBackoff:
    def __init__(
        self,
        initial: float = INITIAL,
        cap: float = CAP,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.initial, self.cap, self.clock = initial, cap, clock
        self._created: dict[str, tuple[int, float]] = {}
        """Per pod key: how many times it was created in a row, and when last."""

    def delay(self, key: str) -> float:
        """Seconds the pod created now under `key` waits before it runs."""
        now = self.clock()
        count, last = self._created.get(key, (0, now))
        if count and now - last >= RESET_AFTER:
            count = 0
        self._created[key] = (count + 1, now)
        if count < 2:
            return 0.0  # the first run, and the first restart
        return min(self.initial * 2.0 ** (count - 2), self.cap)

    def forget(self, key: str) -> None:
        """The pod's job is gone: a new one of the same name starts afresh."""
        self._created.pop(key, None)
