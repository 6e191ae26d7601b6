"""The write stall as the server saw it: the largest gap between commit timestamps.

This cross-checks ``writes_resume_ms``, which comes from the client's clock and log,
against the commit times PostgreSQL itself recorded. It needs
``track_commit_timestamp = on`` on every node (the new primary keeps the timestamps it
replayed as a standby only if the setting was on there too).

A row keeps only the commit time of its last update, so later commits hide earlier
ones; with the workload's random ``aid`` over a large table most pre-stall commits
survive, which is all the gap needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from pytest_pgha.errors import PghaConfigError

# Runs on the new primary after the failover, so it avoids primary-only WAL functions.
COMMIT_TIMES_SQL = """\
SELECT (extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1e6)::bigint AS commit_us
FROM pgbench_accounts
WHERE pg_xact_commit_timestamp(xmin) IS NOT NULL
ORDER BY commit_us"""


def largest_commit_gap_ms(
    commit_times_us: Sequence[int], *, around_us: int, window_us: int
) -> float | None:
    """Largest gap (ms, 0.1 ms) between consecutive distinct commits near ``around_us``.

    Only commits inside ``[around_us - window_us, around_us + window_us]`` count, and only
    gaps that end after ``around_us`` (they span or follow it): a quiet spell before the
    inject is not the failover's doing. None when no such gap exists, e.g. nothing
    committed after ``around_us`` within the window. Make ``window_us`` longer than the
    stall you expect, or the gap is cut short at the window's edge.
    """
    if window_us <= 0:
        raise PghaConfigError.invalid("window_us", window_us, "use a positive window")
    low, high = around_us - window_us, around_us + window_us
    times = sorted({t for t in commit_times_us if low <= t <= high})
    gaps = [b - a for a, b in pairwise(times) if b > around_us]
    return round(max(gaps) / 1000, 1) if gaps else None


def first_commit_after_ms(
    commit_times_us: Sequence[int], *, after_us: int, inject_us: int
) -> float | None:
    """ms from the inject to the first commit at or after ``after_us`` (the promotion's
    start: nothing commits on a standby before it is promoted). None if none did."""
    first = min((t for t in commit_times_us if t >= after_us), default=None)
    return None if first is None else round((first - inject_us) / 1000, 1)
