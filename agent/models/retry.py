"""Retrying model requests: exponential backoff with jitter, honouring the server's Retry-After."""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait before retrying a failed request."""

    max_retries: int = 4
    """Retries after the first attempt; 0 disables retrying."""
    initial_delay: float = 0.5
    """Wait before the first retry, in seconds (before jitter)."""
    multiplier: float = 2.0
    """Growth of the wait per retry."""
    max_delay: float = 20.0
    """Cap on a computed wait, in seconds."""
    jitter: float = 0.5
    """Fraction of each computed wait that is randomised, so clients do not retry in lockstep."""
    max_retry_after: float = 60.0
    """Cap on a wait the server asks for with Retry-After, in seconds."""

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        """The wait before retry number `retry` (0-based) when the server gave no hint."""
        base = min(self.max_delay, self.initial_delay * self.multiplier**retry)
        return base * (1.0 - self.jitter * (rng or random).random())

    def delay(self, retry: int, retry_after: float | None, rng: random.Random | None = None) -> float:
        """The wait before a retry: the server's hint (capped) when given, else the backoff."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return self.backoff(retry, rng)


@dataclass(frozen=True)
class Verdict:
    """Whether a failure is worth retrying, and what the server said about when."""

    retry: bool
    """True for transient failures (timeouts, lost connections, 429, 5xx)."""
    reason: str
    """Short description for logs and the final error."""
    retry_after: float | None = None
    """Seconds the server asked us to wait, if it did."""


@dataclass
class RetryLog:
    """What happened across the attempts of one request."""

    attempts: int = 0
    """Attempts made, the first included."""
    waits: list[float] = field(default_factory=list)
    """Seconds waited before each retry."""
    reasons: list[str] = field(default_factory=list)
    """Why each failed attempt failed."""


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds to wait according to `retry-after-ms` or `retry-after` (seconds or an HTTP date)."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    if (ms := lowered.get("retry-after-ms")) is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    classify: Callable[[BaseException], Verdict],
    policy: RetryPolicy,
    *,
    log: RetryLog | None = None,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """Run attempt until it succeeds, a failure is not retryable, or retries run out.

    The last failure is re-raised unchanged; callers turn it into their own error and may read
    `log` to say how many attempts were made.
    """
    log = log if log is not None else RetryLog()
    while True:
        log.attempts += 1
        try:
            return await attempt()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            verdict = classify(exc)
            log.reasons.append(verdict.reason)
            retries_done = log.attempts - 1
            if not verdict.retry or retries_done >= policy.max_retries:
                raise
            wait = policy.delay(retries_done, verdict.retry_after)
            log.waits.append(wait)
            await sleep(wait)
