"""Fencing by the leading hub's epoch: what a hub publishes carries its epoch (`ce_epoch`),
and a new leader first marks every partition it writes with its own. A reader that has met
an epoch in a partition refuses a hub's record of an older one after it there: a hub that
lost its leadership while paused is never acted on nor believed."""

from __future__ import annotations

from bisect import bisect_left

from bus.base import Record, TopicPartition

EPOCH_HEADER = "ce_epoch"
"""The CloudEvent extension attribute, as a Kafka header (binary content mode)."""


def record_epoch(record: Record) -> int | None:
    """The hub epoch a record carries, if any (one that does not parse counts as none: the
    record's decoding refuses it)."""
    for key, value in record.headers:
        if key == EPOCH_HEADER:
            try:
                return int(value)
            except ValueError:
                return None
    return None


class EpochFence:
    """Where each partition read moved to a newer hub epoch. Kept by offset, not as one
    newest value, so that one fence serves a worker's replay of its whole assignments topic
    and then its consumer, which reads again from its committed offset: a record is judged
    by the epochs met before it in its partition, whichever pass meets it."""

    def __init__(self) -> None:
        self._marks: dict[TopicPartition, list[tuple[int, int]]] = {}
        """Per partition, (offset, epoch) where a newer epoch first appeared, ascending."""

    def admits(self, record: Record) -> bool:
        """Whether the record may be acted on: it carries no epoch (a worker's, a producer's)
        or one at least as new as any met before it in its partition."""
        epoch = record_epoch(record)
        if epoch is None:
            return True
        marks = self._marks.setdefault(record.tp, [])
        at = bisect_left(marks, (record.offset, 0))
        before = marks[at - 1][1] if at else 0
        if epoch < before:
            return False
        if epoch > before:
            if at < len(marks) and marks[at][0] == record.offset:
                return True  # met before
            # Marks after it that it supersedes go; the list stays ascending in both.
            end = at
            while end < len(marks) and marks[end][1] <= epoch:
                end += 1
            marks[at:end] = [(record.offset, epoch)]
        return True

    def newest(self) -> int | None:
        """The newest epoch met in any partition."""
        return max((m[-1][1] for m in self._marks.values() if m), default=None)
