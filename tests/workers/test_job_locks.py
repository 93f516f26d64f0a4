"""Job locks: one job's work in turn, different jobs' at once, and a pass over every job that
waits for the work in hand and keeps new work out until it is done."""

from __future__ import annotations

import asyncio

from workers.job_locks import JobLocks


async def _hold(locks: JobLocks, uid: str, log: list[str], seconds: float = 0.05) -> None:
    async with locks.job(uid):
        log.append(f"+{uid}")
        await asyncio.sleep(seconds)
        log.append(f"-{uid}")


async def test_different_jobs_overlap_and_one_job_waits_its_turn() -> None:
    locks = JobLocks()
    log: list[str] = []
    await asyncio.gather(_hold(locks, "a", log), _hold(locks, "b", log), _hold(locks, "a", log))
    assert log[:2] == ["+a", "+b"]
    assert log.index("-a") < log.index("+a", 1)  # the second "a" started after the first ended
    assert locks._jobs == {}  # nothing kept for jobs with no work in hand


async def test_a_pass_over_every_job_waits_for_the_work_in_hand_and_goes_before_later_work() -> (
    None
):
    locks = JobLocks()
    log: list[str] = []
    first = asyncio.create_task(_hold(locks, "a", log, 0.1))
    await asyncio.sleep(0.01)

    async def sweep() -> None:
        async with locks.every_job():
            log.append("+sweep")
            await asyncio.sleep(0.05)
            log.append("-sweep")

    passing = asyncio.create_task(sweep())
    await asyncio.sleep(0.01)
    later = asyncio.create_task(_hold(locks, "b", log))
    await asyncio.gather(first, passing, later)
    assert log == ["+a", "-a", "+sweep", "-sweep", "+b", "-b"]


async def test_cancelled_waiters_leave_nothing_behind() -> None:
    locks = JobLocks()
    log: list[str] = []
    holder = asyncio.create_task(_hold(locks, "a", log, 0.1))
    await asyncio.sleep(0.01)
    waiter = asyncio.create_task(_hold(locks, "a", log))
    await asyncio.sleep(0.01)
    waiter.cancel()
    await asyncio.gather(holder, waiter, return_exceptions=True)
    async with asyncio.timeout(1), locks.every_job():
        pass
    assert locks._jobs == {}
