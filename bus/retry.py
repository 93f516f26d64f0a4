"""How every part of trainhub tries again after a transient failure: one backoff formula
(bounded exponential, with jitter) and one helper that retries a call while it fails
transiently, built on tenacity. Changing how the house retries is changing this file."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    stop_any,
    stop_never,
)
from tenacity.stop import stop_base

_T = TypeVar("_T")

_MAX_EXPONENT = 64
"""Past this many doublings every wait is at its bound already (and the power overflows)."""

OnRetry = Callable[[BaseException, int, float], None]
"""Told (error, failures so far, seconds until the next try) before each pause."""
WaitFor = Callable[[BaseException, int], float]
"""The pause after (error, failures so far), where the error itself may say (Retry-After)."""


@dataclass(frozen=True)
class RetryPolicy:
    """The pause after the n-th failure in a row is `initial_wait * multiplier ** (n - 1)`,
    at most `max_wait`, plus a random extra of up to `jitter * initial_wait` (so that clients
    refused together do not all come back together). Tries stop after `attempts` in all or
    once `deadline` seconds have passed since the first failure, whichever comes first; with
    neither, they go on until the call passes or fails for good."""

    initial_wait: float = 0.2
    max_wait: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.0
    attempts: int | None = None
    deadline: float | None = None

    def wait(self, failures: int) -> float:
        """Seconds to pause after the `failures`-th failure in a row (the first is 1)."""
        exponent = min(max(failures - 1, 0), _MAX_EXPONENT)
        backoff = min(self.max_wait, self.initial_wait * self.multiplier**exponent)
        return backoff + random.uniform(0.0, self.jitter * self.initial_wait)

    def unlimited(self) -> RetryPolicy:
        """The same pauses with no limit on tries (for loops that go on until cancelled)."""
        return RetryPolicy(self.initial_wait, self.max_wait, self.multiplier, self.jitter)

    def stop(self) -> stop_base:
        """The policy's limits as a tenacity stop condition."""
        limits: list[stop_base] = []
        if self.attempts is not None:
            limits.append(stop_after_attempt(self.attempts))
        if self.deadline is not None:
            limits.append(stop_after_delay(self.deadline))
        if not limits:
            return stop_never
        return limits[0] if len(limits) == 1 else stop_any(*limits)


async def retry_transient(
    call: Callable[[], Awaitable[_T]],
    policy: RetryPolicy,
    *,
    transient: Callable[[BaseException], bool],
    on_retry: OnRetry | None = None,
    wait: WaitFor | None = None,
    keep_trying: Callable[[], bool] | None = None,
    failed_with: BaseException | None = None,
) -> _T:
    """`call()`, tried again after each failure that `transient` accepts, pausing as `policy`
    says (or as `wait` says for the error in hand), until it passes, fails for good or the
    policy's limits run out; the last failure is raised then.

    The first try is made bare (a hot path, such as a send per record, pays for no retrier
    unless it fails). `keep_trying`, asked before each pause and again after it, ends the
    tries with the last failure once it says no (a worker that stops). `failed_with`: a
    failure of this call had already, counted as the first try: the call waits before its
    first try here."""
    if failed_with is None:
        try:
            return await call()
        except Exception as error:
            if not transient(error):
                raise
            failed_with = error

    def retryable(error: BaseException) -> bool:
        return transient(error) and (keep_trying is None or keep_trying())

    def pause(state: RetryCallState) -> float:
        error = _failure(state)
        if wait is not None:
            return wait(error, state.attempt_number)
        return policy.wait(state.attempt_number)

    def before_sleep(state: RetryCallState) -> None:
        if on_retry is not None:
            sleep = state.next_action.sleep if state.next_action is not None else 0.0
            on_retry(_failure(state), state.attempt_number, sleep)

    retrying = AsyncRetrying(
        stop=policy.stop(),
        wait=pause,
        retry=retry_if_exception(retryable),
        before_sleep=before_sleep,
        reraise=True,
    )
    pending: BaseException | None = failed_with
    last: BaseException = failed_with
    async for attempt in retrying:
        with attempt:
            if pending is not None:
                # The failure had before tenacity started counts as its first attempt, so
                # that its pause and its limits are tenacity's like every other's.
                handed, pending = pending, None
                raise handed
            if keep_trying is not None and not keep_trying():
                raise last
            try:
                return await call()
            except Exception as error:
                last = error
                raise
    raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover


def _failure(state: RetryCallState) -> BaseException:
    error = state.outcome.exception() if state.outcome is not None else None
    assert error is not None, "tenacity retries only after a failure"
    return error
