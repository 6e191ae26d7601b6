"""What one failover cost the application, from the transaction log and the timeline.

The headline numbers follow the failover lab ("ProxySQL for PostgreSQL - Surviving an
unplanned primary failure") exactly, so results can be compared with it; the rest
split those numbers by cause.

Units: ``writes_resume_ms`` is an int, a multiple of the bucket width (it cannot be more
precise than one bucket). Every other duration is a float in milliseconds rounded to
0.1 ms: the inputs are microsecond timestamps, and 0.1 ms keeps JSON and tables short
while staying well below the ~1 ms the harness's clocks are good for.

Post-inject means ``inject_us <= end_us`` (and ``end_us < until_us`` when given):
everything after ``until_us`` is outside the observation window for every metric.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import NamedTuple

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.metrics.buckets import (
    DEFAULT_BUCKET_MS,
    Bucket,
    post_inject_buckets,
    validate_bucket_ms,
)
from pytest_pgha.metrics.catalog import register_metric
from pytest_pgha.timeline import (
    DETECT,
    PROMOTE_DONE,
    PROMOTE_START,
    REWIRE_DONE,
    REWIRE_START,
    Event,
    first_at_or_after,
)
from pytest_pgha.workload.records import Outcome, TxRecord


@dataclass(frozen=True)
class FailoverMetrics:
    """The numbers of one failover trial; each field is in the metric catalog."""

    writes_resume_ms: int | None
    error_count_post_inject: int
    total_ok_pre_inject: int
    ok_post_inject: int
    in_flight_errors: int
    retry_errors: int
    indeterminate_commits: int
    connect_failures: int
    workers: int
    workers_lost: int
    connections_survived: int
    reconnect_ms_max: float | None
    reconnect_ms_median: float | None
    detect_ms: float | None
    promote_ms: float | None
    rewire_ms: float | None
    ready_ms: float | None
    recovery_ms: float | None = None
    # Not a metric: the resolution writes_resume_ms was measured at.
    bucket_ms: int = DEFAULT_BUCKET_MS
    # Filled in by the scenario: the server-side cross-check and the harness's own
    # timing error, which do not come from the transaction log.
    server_write_gap_ms: float | None = None
    server_resume_ms: float | None = None
    harness_lag_ms_max: float | None = None
    harness_lag_ms_p99: float | None = None
    workload_lag_ms_max: float | None = None
    workload_lag_ms_p99: float | None = None

    def to_json(self) -> dict[str, int | float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


BUCKET = "one bucket width (100 ms by default)"
CLOCK = "~1 ms (the harness's clocks)"
COUNT = "exact"


def _failover(name: str, unit: str, meaning: str, precision: str, **flags: bool) -> None:
    register_metric(
        name, unit=unit, meaning=meaning, precision=precision, group="failover", **flags
    )


_failover(
    "writes_resume_ms",
    "ms",
    "inject to the first clean bucket (ok>0, err==0) after the first disrupted one; "
    "-1 = no disruption, None = never resumed",
    BUCKET,
    minus_one_is_undisrupted=True,
    timed=True,
)
_failover(
    "recovery_ms",
    "ms",
    "writes_resume_ms - detect_ms: from the HA manager declaring the primary dead to the "
    "first clean bucket (promotion, proxy, reconnects); -1 = no disruption, None = never "
    "resumed or nothing detected",
    BUCKET + "; slightly negative when writes resumed in the bucket of the detection",
    minus_one_is_undisrupted=True,
    timed=True,
)
_failover(
    "error_count_post_inject",
    "count",
    "failed, indeterminate or connect-failed attempts after the inject",
    COUNT,
)
_failover("total_ok_pre_inject", "count", "successful transactions before the inject", COUNT)
_failover(
    "ok_post_inject", "count", "successful transactions after the inject, in the window", COUNT
)
_failover(
    "in_flight_errors",
    "count",
    "post-inject errors on a worker whose previous transaction had succeeded",
    COUNT,
)
_failover(
    "retry_errors",
    "count",
    "post-inject errors on a worker whose previous transaction had also failed",
    COUNT,
)
_failover(
    "indeterminate_commits",
    "count",
    "post-inject transactions whose COMMIT outcome is unknown",
    COUNT,
)
_failover("connect_failures", "count", "post-inject attempts that could not even connect", COUNT)
_failover("workers", "workers", "workload workers (distinct client ids, or as configured)", COUNT)
_failover(
    "workers_lost",
    "workers",
    "workers whose last post-inject error was never followed by a success",
    COUNT,
)
_failover(
    "connections_survived",
    "workers",
    "workers whose client connection never broke after the inject",
    COUNT,
)
_failover(
    "reconnect_ms_max",
    "ms",
    "slowest erring worker: rewire_done (else promote_done, else inject) to its first "
    "success after its first error; None if one never succeeded",
    CLOCK,
    timed=True,
)
_failover("reconnect_ms_median", "ms", "median of the same per-worker times", CLOCK, timed=True)
_failover("detect_ms", "ms", "detect - inject", CLOCK, timed=True)
_failover("promote_ms", "ms", "promote_done - promote_start", CLOCK, timed=True)
_failover("rewire_ms", "ms", "rewire_done - rewire_start", CLOCK, timed=True)
_failover("ready_ms", "ms", "rewire_done (else promote_done) - inject", CLOCK, timed=True)
_failover(
    "server_write_gap_ms",
    "ms",
    "largest gap between commit timestamps around the inject, read on the new primary "
    "(pg_xact_commit_timestamp)",
    "the commit density (~0.1 ms at 10k tps)",
)
_failover(
    "server_resume_ms",
    "ms",
    "first commit on the new primary (timestamp at or after promote_start) - inject; an "
    "upper bound: only each row's last commit is kept",
    "always <= writes_resume_ms + one bucket",
)
register_metric(
    "harness_lag_ms_max",
    unit="ms",
    meaning="how late the harness ran a planned action (fault, detection delay, probe, "
    "sample, its 10 ms heartbeat), the largest over the trial",
    precision="~0.1 ms",
    group="harness",
)
register_metric(
    "harness_lag_ms_p99",
    unit="ms",
    meaning="the 99th percentile of the same lateness",
    precision="~0.1 ms",
    group="harness",
)
register_metric(
    "workload_lag_ms_max",
    unit="ms",
    meaning="how late the workload processes' 10 ms heartbeat woke, the largest over the "
    "trial: the error of the clock that stamps each transaction",
    precision="~0.1 ms",
    group="harness",
)
register_metric(
    "workload_lag_ms_p99",
    unit="ms",
    meaning="the 99th percentile of the same lateness",
    precision="~0.1 ms",
    group="harness",
)


def writes_resume_ms(buckets: Sequence[Bucket]) -> int | None:
    """The seed's resume offset over contiguous post-inject buckets.

    An empty window gives None: no write was seen after the inject, so nothing shows
    that writes work, and an SLO must not pass on that.
    """
    if not buckets:
        return None
    opened = next((b.index for b in buckets if b.disrupted), None)
    if opened is None:
        return -1
    resumed = next((b for b in buckets if b.index > opened and b.clean), None)
    return None if resumed is None else resumed.start_ms


def compute_failover_metrics(
    records: Iterable[TxRecord],
    events: Iterable[Event],
    *,
    inject_us: int,
    bucket_ms: int = DEFAULT_BUCKET_MS,
    until_us: int | None = None,
    workers: int | None = None,
) -> FailoverMetrics:
    """All failover metrics of one trial; ``inject_us`` is the inject's epoch_us."""
    validate_bucket_ms(bucket_ms)
    log = [r for r in records if until_us is None or r.end_us < until_us]
    timeline = list(events)
    post = [r for r in log if r.end_us >= inject_us]
    histories = _by_worker(log)
    tally = _WorkerTally.of(histories, inject_us, _reconnect_ref_us(timeline, inject_us))
    buckets = post_inject_buckets(log, inject_us=inject_us, bucket_ms=bucket_ms, until_us=until_us)
    worker_count = _worker_count(workers, histories)
    phases = _phases(timeline, inject_us)
    resume_ms = writes_resume_ms(buckets)
    return FailoverMetrics(
        writes_resume_ms=resume_ms,
        error_count_post_inject=sum(r.outcome.is_error for r in post),
        total_ok_pre_inject=sum(r.outcome is Outcome.OK for r in log if r.end_us < inject_us),
        ok_post_inject=sum(r.outcome is Outcome.OK for r in post),
        in_flight_errors=tally.in_flight,
        retry_errors=tally.retry,
        indeterminate_commits=sum(r.outcome is Outcome.INDETERMINATE for r in post),
        connect_failures=sum(r.outcome is Outcome.CONNECT_FAILED for r in post),
        workers=worker_count,
        workers_lost=tally.lost,
        connections_survived=max(0, worker_count - tally.broken),
        reconnect_ms_max=_max_ms(tally.reconnect_us),
        reconnect_ms_median=_median_ms(tally.reconnect_us),
        detect_ms=phases.detect_ms,
        promote_ms=phases.promote_ms,
        rewire_ms=phases.rewire_ms,
        ready_ms=phases.ready_ms,
        recovery_ms=recovery_ms(resume_ms, phases.detect_ms),
        bucket_ms=bucket_ms,
    )


def recovery_ms(resume_ms: int | None, detect_ms: float | None) -> float | None:
    """The part of the stall that follows the detection: what the stack (promotion,
    proxy, reconnects) controls, whatever detection policy the test chose."""
    if resume_ms == -1:
        return -1
    if resume_ms is None or detect_ms is None:
        return None
    return round(resume_ms - detect_ms, 1)


def _worker_count(configured: int | None, histories: dict[int, list[TxRecord]]) -> int:
    if configured is None:
        return len(histories)
    if isinstance(configured, bool) or not isinstance(configured, int) or configured < 1:
        raise PghaConfigError.invalid("workers", configured, "use a positive number of workers")
    return configured


def _by_worker(records: Iterable[TxRecord]) -> dict[int, list[TxRecord]]:
    histories: dict[int, list[TxRecord]] = defaultdict(list)
    for record in sorted(records, key=lambda r: (r.end_us, r.txn_no)):
        histories[record.client_id].append(record)
    return dict(histories)


@dataclass
class _WorkerTally:
    """Per-worker facts summed over workers; reconnect_us keeps one entry per erring worker."""

    in_flight: int = 0
    retry: int = 0
    lost: int = 0
    broken: int = 0
    # None marks a worker with no success after both its first error and the reference.
    reconnect_us: list[int | None] = field(default_factory=list)

    @classmethod
    def of(cls, histories: dict[int, list[TxRecord]], inject_us: int, ref_us: int) -> _WorkerTally:
        tally = cls()
        for history in histories.values():
            tally._add(history, inject_us, ref_us)
        return tally

    def _add(self, history: list[TxRecord], inject_us: int, ref_us: int) -> None:
        in_flight, retry = _classify_errors(history, inject_us)
        self.in_flight += in_flight
        self.retry += retry
        post = [r for r in history if r.end_us >= inject_us]
        if not any(r.outcome.is_error for r in post):
            return
        self.lost += _is_lost(post)
        self.broken += any(r.connection_broken for r in post if r.outcome.is_error)
        self.reconnect_us.append(_reconnect_us(post, ref_us))


def _classify_errors(history: list[TxRecord], inject_us: int) -> tuple[int, int]:
    """(in-flight, retry) post-inject errors of one worker.

    An error right after an error is the worker retrying into a still-broken path (a
    fail-fast proxy produces many); any other error hit a transaction that was running
    on a working connection, which is what the seed counts as one error per worker.
    """
    in_flight = retry = 0
    previous_failed = False
    for record in history:
        failed = record.outcome.is_error
        if failed and record.end_us >= inject_us:
            if previous_failed:
                retry += 1
            else:
                in_flight += 1
        previous_failed = failed
    return in_flight, retry


def _is_lost(post: list[TxRecord]) -> bool:
    last_error = max(i for i, r in enumerate(post) if r.outcome.is_error)
    return not any(r.outcome is Outcome.OK for r in post[last_error + 1 :])


def _reconnect_us(post: list[TxRecord], ref_us: int) -> int | None:
    # Timed from the reference event, but only a success after the worker's first error
    # counts: right after the inject workers still commit on the dying primary.
    first_error_us = next(r.end_us for r in post if r.outcome.is_error)
    since_us = max(ref_us, first_error_us)
    ok_us = next((r.end_us for r in post if r.outcome is Outcome.OK and r.end_us >= since_us), None)
    return None if ok_us is None else ok_us - ref_us


def _max_ms(values_us: list[int | None]) -> float | None:
    if not values_us or any(v is None for v in values_us):
        return None
    return _ms(max(v for v in values_us if v is not None))


def _median_ms(values_us: list[int | None]) -> float | None:
    # A worker that never reconnected counts as infinitely slow rather than being
    # dropped, so the median only becomes None once half the workers never came back.
    if not values_us:
        return None
    median = statistics.median(math.inf if v is None else float(v) for v in values_us)
    return None if math.isinf(median) else _ms(median)


def _reconnect_ref_us(events: list[Event], inject_us: int) -> int:
    for name in (REWIRE_DONE, PROMOTE_DONE):
        at = first_at_or_after(events, name, inject_us)
        if at is not None:
            return at
    return inject_us


class _Phases(NamedTuple):
    detect_ms: float | None
    promote_ms: float | None
    rewire_ms: float | None
    ready_ms: float | None


def _phases(events: list[Event], inject_us: int) -> _Phases:
    detect = first_at_or_after(events, DETECT, inject_us)
    promote_start = first_at_or_after(events, PROMOTE_START, inject_us)
    promote_done = first_at_or_after(events, PROMOTE_DONE, _or(promote_start, inject_us))
    rewire_start = first_at_or_after(events, REWIRE_START, inject_us)
    rewire_done = first_at_or_after(events, REWIRE_DONE, _or(rewire_start, inject_us))
    ready = promote_done if rewire_done is None else rewire_done
    return _Phases(
        detect_ms=_span_ms(inject_us, detect),
        promote_ms=_span_ms(promote_start, promote_done),
        rewire_ms=_span_ms(rewire_start, rewire_done),
        ready_ms=_span_ms(inject_us, ready),
    )


def _or(value: int | None, fallback: int) -> int:
    return fallback if value is None else value


def _span_ms(start_us: int | None, end_us: int | None) -> float | None:
    if start_us is None or end_us is None:
        return None
    return _ms(end_us - start_us)


def _ms(us: float) -> float:
    return round(us / 1000, 1)
