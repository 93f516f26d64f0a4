"""How long a cluster has been silent, counting only the time the hub could hear it.

The hub measures a cluster's silence up to the last moment it provably had every heartbeat
on the bus in hand, and leaves out the stretches in between when it could not tell (the
broker did not answer): a Kafka outage silences every cluster at once as far as the hub can
see, and must not pass for lost clusters, neither during it nor just after it, while the
workers are still reconnecting.
"""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime, timedelta


class HeartbeatFeedClock:
    def __init__(self, started: datetime, check_interval: float, keep: timedelta) -> None:
        self.read_at = started
        """The last time every heartbeat published before it had been handled."""
        self._gap = timedelta(seconds=max(2.5, 4 * check_interval))
        """A longer pause between two successful checks is time the hub could not hear; a
        shorter one is a slow answer on a busy machine, and counts as heard."""
        self._keep = keep
        self._blind: deque[tuple[datetime, datetime]] = deque()

    def caught_up(self, at: datetime) -> None:
        """Every heartbeat published before `at` is handled."""
        if at - self.read_at > self._gap:
            self._blind.append((self.read_at, at))
        self.read_at = max(self.read_at, at)
        while self._blind and self._blind[0][1] < self.read_at - self._keep:
            self._blind.popleft()

    def silence(self, observed: datetime | None) -> float:
        """Seconds of audible silence since a heartbeat observed at `observed`."""
        if observed is None:
            return 0.0
        if observed.tzinfo is None:
            observed = observed.replace(tzinfo=UTC)
        heard = (self.read_at - observed).total_seconds()
        for start, end in self._blind:
            overlap = (min(end, self.read_at) - max(start, observed)).total_seconds()
            if overlap > 0:
                heard -= overlap
        return max(0.0, heard)
