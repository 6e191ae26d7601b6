"""The one polling helper: wait until a condition holds, with a short first interval
that grows, and an error that says what was awaited and the last failure seen."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg

from pytest_pgha.errors import ClusterError, PghaError


def wait_until(
    predicate: Callable[[], object],
    *,
    timeout: float,
    interval: float = 0.003,
    max_interval: float = 0.05,
    what: str = "condition",
    retry_on: tuple[type[Exception], ...] = (psycopg.Error,),
    error: type[PghaError] = ClusterError,
) -> None:
    """Poll predicate until it is true; the exceptions in retry_on count as "not yet".
    The interval grows to max_interval: most conditions hold within milliseconds, and
    each poll may cost a SCRAM login on a machine with two cores."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            if predicate():
                return
        except retry_on as failure:
            last_error = failure
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
        interval = min(interval * 1.5, max_interval)
    suffix = f" (last error: {last_error})" if last_error else ""
    raise error(f"timed out after {timeout:.1f}s waiting for {what}{suffix}")
