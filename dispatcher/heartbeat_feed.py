"""How long a cluster has been silent, counting only the time the hub could hear it.

The hub measures a cluster's silence up to the last moment it provably had every heartbeat
on the bus in hand, and leaves out the stretches in between when it could not tell (the
broker did not answer): a Kafka outage silences every cluster at once as far as the hub can
see, and must not pass for lost clusters, neither during it nor just after it, while the
workers are still reconnecting. Nor could it hear anything before it started: a cluster
silent since before then is owed the same `lost_after` from the hub's start, so a hub started
together with (or after) a worker that is still connecting loses nothing, and a cluster that
died while no hub ran is declared lost once, `lost_after` into the hub's life.
"""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime, timedelta


class HeartbeatFeedClock:
    def __init__(self, started: datetime, check_interval: float, keep: timedelta) -> None:
        self.started = started
        """When the hub began to listen: silence before it is not counted."""
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

    def predates_start(self, observed: datetime | None) -> bool:
        """Whether a heartbeat observed then is older than the hub's listening."""
        if observed is None:
            return False
        if observed.tzinfo is None:
            observed = observed.replace(tzinfo=UTC)
        return observed < self.started

    def silence(self, observed: datetime | None) -> float:
        """Seconds of audible silence since a heartbeat observed at `observed`."""
        if observed is None:
            return 0.0
        if observed.tzinfo is None:
            observed = observed.replace(tzinfo=UTC)
        observed = max(observed, self.started)
        heard = (self.read_at - observed).total_seconds()
        for start, end in self._blind:
            overlap = (min(end, self.read_at) - max(start, observed)).total_seconds()
            if overlap > 0:
                heard -= overlap
        return max(0.0, heard)
