"""Retries of an error the service marks ``retryable``: off unless asked for, bounded in tries
and in the time spent waiting, and never sooner than the service's ``Retry-After``."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from .errors import ReactStepError


@dataclass(frozen=True)
class RetryInfo:
    """What ``on_retry`` is told before each wait."""

    attempt: int
    """The try that failed (1 for the first)."""
    delay: float
    """Seconds the client waits before the next try."""
    error: ReactStepError


@dataclass(frozen=True)
class RetryOptions:
    attempts: int = 3
    """Tries in all, the first included (1 to 10)."""
    base_delay: float = 0.5
    """Base of the exponential backoff (full jitter) when the answer names no wait, in seconds."""
    max_delay: float = 30.0
    """The longest wait between tries. A ``Retry-After`` longer than this is not cut short: the
    error is raised instead, since an earlier try would be refused again."""
    max_total_delay: float = 60.0
    """The most time all the waits of one call may add up to; a wait past it raises the error."""
    on_retry: Callable[[RetryInfo], None] | None = None
    """Called before each wait."""


class Backoff:
    """The waits of one call: how long before the next try, or ``None`` for no more tries."""

    def __init__(self, options: RetryOptions | None) -> None:
        self._options = options
        self._waited = 0.0

    def delay_before(self, attempt: int, error: ReactStepError) -> float | None:
        """The wait after try ``attempt`` failed with ``error``; ``None`` to raise it."""
        options = self._options
        if options is None or not error.retryable or attempt >= _attempts(options):
            return None
        left = max(0.0, options.max_total_delay - self._waited)
        if error.retry_after is not None:
            # An integer past what a float holds is a wait longer than any bound.
            delay = float(error.retry_after) if error.retry_after < 2**53 else math.inf
            if delay > options.max_delay or delay > left:
                return None
        else:
            ceiling = min(options.max_delay, options.base_delay * 2 ** (attempt - 1), left)
            delay = random.uniform(0.0, max(0.0, ceiling))
        self._waited += delay
        if options.on_retry is not None:
            options.on_retry(RetryInfo(attempt=attempt, delay=delay, error=error))
        return delay


def retry_options(option: RetryOptions | bool | None) -> RetryOptions | None:
    """``True`` for the defaults; ``None`` or ``False`` for no retries."""
    if option is None or option is False:
        return None
    return RetryOptions() if option is True else option


def _attempts(options: RetryOptions) -> int:
    return min(10, max(1, options.attempts))
