"""The epoch fence: a hub's record of an older epoch than one met before it in its partition
is refused, whichever pass over the partition meets it."""

from __future__ import annotations

from bus.base import Record
from bus.epochs import EpochFence, record_epoch


def _record(offset: int, epoch: int | None, partition: int = 0) -> Record:
    headers = () if epoch is None else (("ce_epoch", str(epoch).encode()),)
    return Record("t", partition, offset, b"k", b"{}", headers)


def test_an_older_epoch_after_a_newer_one_is_refused_in_that_partition_only() -> None:
    fence = EpochFence()
    assert fence.admits(_record(0, 1))
    assert fence.admits(_record(1, None))  # a worker's or a producer's: no epoch
    assert fence.admits(_record(2, 2))
    assert not fence.admits(_record(3, 1))
    assert fence.admits(_record(4, None))
    assert fence.admits(_record(0, 1, partition=1))  # the other partition met no epoch 2
    assert fence.newest() == 2


def test_a_second_pass_from_an_earlier_offset_judges_by_what_came_before() -> None:
    fence = EpochFence()
    for offset, epoch in [(0, 1), (1, 1), (2, 2), (3, 1), (4, 2)]:
        fence.admits(_record(offset, epoch))
    # A consumer reading again from offset 1 (its committed offset), as a restarted worker
    # does after replaying its whole topic: the same verdicts.
    assert [fence.admits(_record(o, e)) for o, e in [(1, 1), (2, 2), (3, 1), (4, 2)]] == [
        True,
        True,
        False,
        True,
    ]


def test_a_malformed_epoch_counts_as_none() -> None:
    record = Record("t", 0, 0, None, b"{}", (("ce_epoch", b"x"),))
    assert record_epoch(record) is None and EpochFence().admits(record)
