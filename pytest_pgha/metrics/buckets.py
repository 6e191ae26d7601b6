"""Fixed-width time buckets of transaction outcomes, counted from the inject.

A record belongs to the bucket of its END time: that is when the application learned
the outcome, which is what the seed lab's charts and ``writes_resume_ms`` count. Bucket
``i`` covers ``[inject + i*width, inject + (i+1)*width)``; negative indexes lie before
the inject and are only used for charts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.workload.records import TxRecord

DEFAULT_BUCKET_MS = 100
MIN_BUCKET_MS = 10
MAX_BUCKET_MS = 1000


@dataclass(frozen=True, slots=True)
class Bucket:
    """Outcomes of the transactions that ended inside one bucket."""

    index: int
    start_ms: int  # offset of the bucket's start from the inject
    ok: int
    err: int

    @property
    def disrupted(self) -> bool:
        # The seed's definition: no success at all, or any error, marks a bad bucket.
        return self.ok == 0 or self.err > 0

    @property
    def clean(self) -> bool:
        return not self.disrupted


def validate_bucket_ms(bucket_ms: int) -> int:
    """Return ``bucket_ms`` or raise: narrower buckets are mostly empty at lab rates,
    wider ones hide the stall the metric exists to measure."""
    if isinstance(bucket_ms, bool) or not isinstance(bucket_ms, int):
        raise PghaConfigError.invalid(
            "bucket_ms", bucket_ms, f"use a whole number of milliseconds, e.g. {DEFAULT_BUCKET_MS}"
        )
    if not MIN_BUCKET_MS <= bucket_ms <= MAX_BUCKET_MS:
        raise PghaConfigError.invalid(
            "bucket_ms", bucket_ms, f"use a width between {MIN_BUCKET_MS} and {MAX_BUCKET_MS} ms"
        )
    return bucket_ms


def bucket_index(end_us: int, *, inject_us: int, bucket_ms: int) -> int:
    """Index of the bucket holding ``end_us``; floor division keeps pre-inject ones negative."""
    return (end_us - inject_us) // (bucket_ms * 1000)


def post_inject_buckets(
    records: Iterable[TxRecord],
    *,
    inject_us: int,
    bucket_ms: int = DEFAULT_BUCKET_MS,
    until_us: int | None = None,
) -> list[Bucket]:
    """Buckets 0..last of the observation window, empty ones included.

    The window is ``[inject_us, until_us)``; without ``until_us`` it ends with (and
    includes) the last record's end. Records outside it are ignored. An empty window
    (nothing ended after the inject and no ``until_us``) gives an empty list.
    """
    validate_bucket_ms(bucket_ms)
    kept = [r for r in records if r.end_us >= inject_us]
    window_end_us = until_us if until_us is not None else _last_end(kept, inject_us) + 1
    if window_end_us <= inject_us:
        return []
    last = bucket_index(window_end_us - 1, inject_us=inject_us, bucket_ms=bucket_ms)
    return _count(kept, inject_us, bucket_ms, first=0, last=last, window_end_us=window_end_us)


def pre_inject_buckets(
    records: Iterable[TxRecord],
    *,
    inject_us: int,
    since_us: int,
    bucket_ms: int = DEFAULT_BUCKET_MS,
) -> list[Bucket]:
    """Buckets with negative indexes covering ``[since_us, inject_us)``, for charts.

    The first bucket is the one holding ``since_us``; since it may begin before
    ``since_us``, it can be partial.
    """
    validate_bucket_ms(bucket_ms)
    if since_us >= inject_us:
        return []
    first = bucket_index(since_us, inject_us=inject_us, bucket_ms=bucket_ms)
    kept = [r for r in records if r.end_us >= since_us]
    return _count(kept, inject_us, bucket_ms, first=first, last=-1, window_end_us=inject_us)


def _last_end(records: list[TxRecord], inject_us: int) -> int:
    return max((r.end_us for r in records), default=inject_us - 1)


def _count(
    records: Iterable[TxRecord],
    inject_us: int,
    bucket_ms: int,
    *,
    first: int,
    last: int,
    window_end_us: int,
) -> list[Bucket]:
    ok: Counter[int] = Counter()
    err: Counter[int] = Counter()
    for record in records:
        if record.end_us >= window_end_us:
            continue
        index = bucket_index(record.end_us, inject_us=inject_us, bucket_ms=bucket_ms)
        if first <= index <= last:
            (err if record.outcome.is_error else ok)[index] += 1
    return [Bucket(i, i * bucket_ms, ok[i], err[i]) for i in range(first, last + 1)]
