"""The house's retry policy: the backoff formula's bounds and jitter, and which failures the
retry helper tries again, how often and for how long."""

from __future__ import annotations

import time

import pytest

from bus.retry import RetryPolicy, retry_transient


class Transient(Exception):
    pass


class Permanent(Exception):
    pass


def _transient(error: BaseException) -> bool:
    return isinstance(error, Transient)


class Flaky:
    """Fails its first `failures` calls with `error`, then answers how many calls it took."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or Transient("not yet")
        self.calls = 0

    async def __call__(self) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return self.calls


_FAST = RetryPolicy(initial_wait=0.001, max_wait=0.004)


def test_the_wait_doubles_from_the_initial_wait_up_to_the_bound() -> None:
    policy = RetryPolicy(initial_wait=0.2, max_wait=5.0)
    waits = [policy.wait(failures) for failures in range(1, 9)]
    assert waits == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])
    assert policy.wait(0) == pytest.approx(0.2)  # no failure counted yet: the first wait
    assert policy.wait(10_000) == pytest.approx(5.0)  # no overflow far past the bound


def test_the_multiplier_sets_the_growth() -> None:
    policy = RetryPolicy(initial_wait=1.0, max_wait=100.0, multiplier=3.0)
    assert [policy.wait(n) for n in (1, 2, 3, 4, 5, 6)] == pytest.approx([1, 3, 9, 27, 81, 100])


def test_jitter_adds_up_to_that_many_initial_waits_and_varies() -> None:
    policy = RetryPolicy(initial_wait=0.2, max_wait=5.0, jitter=1.0)
    for failures, backoff in ((1, 0.2), (3, 0.8), (20, 5.0)):
        waits = [policy.wait(failures) for _ in range(500)]
        assert all(backoff <= wait <= backoff + 0.2 for wait in waits)
        assert len(set(waits)) > 400  # clients refused together come back apart
    assert {RetryPolicy(jitter=0.0).wait(2) for _ in range(50)} == {0.2 * 2.0}


def test_unlimited_keeps_the_pauses_and_drops_the_limits() -> None:
    policy = RetryPolicy(0.1, 2.0, 3.0, 0.5, attempts=4, deadline=9.0)
    assert policy.unlimited() == RetryPolicy(0.1, 2.0, 3.0, 0.5)


async def test_a_call_that_passes_is_called_once() -> None:
    call = Flaky(0)
    assert await retry_transient(call, _FAST, transient=_transient) == 1


async def test_transient_failures_are_tried_again_until_the_call_passes() -> None:
    call = Flaky(4)
    told: list[tuple[int, float]] = []
    result = await retry_transient(
        call, _FAST, transient=_transient, on_retry=lambda e, n, wait: told.append((n, wait))
    )
    assert result == 5
    assert [n for n, _ in told] == [1, 2, 3, 4]
    assert [wait for _, wait in told] == pytest.approx([0.001, 0.002, 0.004, 0.004])


async def test_a_permanent_failure_is_raised_at_once() -> None:
    call = Flaky(3, Permanent("no"))
    with pytest.raises(Permanent):
        await retry_transient(call, _FAST, transient=_transient)
    assert call.calls == 1


async def test_a_permanent_failure_after_transient_ones_ends_the_tries() -> None:
    class TurnsPermanent(Flaky):
        async def __call__(self) -> int:
            self.calls += 1
            raise (Transient() if self.calls < 3 else Permanent())

    call = TurnsPermanent(0)
    with pytest.raises(Permanent):
        await retry_transient(call, _FAST, transient=_transient)
    assert call.calls == 3


async def test_attempts_count_every_try_and_the_last_failure_is_raised() -> None:
    call = Flaky(100)
    with pytest.raises(Transient, match="not yet"):
        await retry_transient(call, RetryPolicy(0.001, 0.001, attempts=3), transient=_transient)
    assert call.calls == 3
    single = Flaky(100)
    with pytest.raises(Transient):
        await retry_transient(single, RetryPolicy(attempts=1), transient=_transient)
    assert single.calls == 1


async def test_a_deadline_bounds_the_time_spent_trying() -> None:
    call = Flaky(10_000)
    started = time.monotonic()
    with pytest.raises(Transient):
        await retry_transient(call, RetryPolicy(0.01, 0.05, deadline=0.3), transient=_transient)
    assert 0.3 <= time.monotonic() - started < 1.0
    assert 3 <= call.calls < 30


async def test_the_wait_can_come_from_the_error() -> None:
    told: list[float] = []
    await retry_transient(
        Flaky(2),
        RetryPolicy(initial_wait=10.0),
        transient=_transient,
        wait=lambda error, failures: 0.001 * failures,
        on_retry=lambda e, n, wait: told.append(wait),
    )
    assert told == pytest.approx([0.001, 0.002])


async def test_keep_trying_ends_the_tries_with_the_last_failure() -> None:
    call = Flaky(100)
    with pytest.raises(Transient):
        await retry_transient(call, _FAST, transient=_transient, keep_trying=lambda: call.calls < 3)
    assert call.calls == 3
    # Said no during the pause: no further try, the last failure is raised.
    stopping = False

    def note(error: BaseException, failures: int, wait: float) -> None:
        nonlocal stopping
        stopping = True

    late = Flaky(100)
    with pytest.raises(Transient):
        await retry_transient(
            late, _FAST, transient=_transient, on_retry=note, keep_trying=lambda: not stopping
        )
    assert late.calls == 1


async def test_a_failure_had_before_makes_the_first_try_wait() -> None:
    call = Flaky(1)
    told: list[int] = []
    result = await retry_transient(
        call,
        _FAST,
        transient=_transient,
        on_retry=lambda e, n, wait: told.append(n),
        failed_with=Transient("earlier"),
    )
    assert (result, call.calls, told) == (2, 2, [1, 2])
