"""Failover metrics from synthetic transaction logs; no database involved."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.metrics.buckets import (
    bucket_index,
    post_inject_buckets,
    pre_inject_buckets,
    validate_bucket_ms,
)
from pytest_pgha.metrics.failover import FailoverMetrics, compute_failover_metrics
from pytest_pgha.metrics.server_gap import (
    COMMIT_TIMES_SQL,
    first_commit_after_ms,
    largest_commit_gap_ms,
)
from pytest_pgha.timeline import Event
from pytest_pgha.workload.records import Outcome, TxRecord

INJECT_US = 1_700_000_000_000_000
WORKERS = 8


def at(ms: float) -> int:
    """Epoch microseconds ``ms`` after the inject."""
    return INJECT_US + round(ms * 1000)


def event(name: str, ms: float) -> Event:
    return Event(name, at(ms), 0)


class Log:
    """Builds per-worker transaction histories with consecutive txn numbers."""

    def __init__(self) -> None:
        self.records: list[TxRecord] = []
        self._txn: defaultdict[int, int] = defaultdict(int)

    def add(
        self,
        client: int,
        end_ms: float,
        outcome: Outcome = Outcome.OK,
        *,
        broken: bool = False,
    ) -> Log:
        sqlstate = None if outcome is Outcome.OK else "08006"
        end = at(end_ms)
        record = TxRecord(client, self._txn[client], end - 500, end, outcome, sqlstate, broken)
        self._txn[client] += 1
        self.records.append(record)
        return self

    def ok(self, client: int, from_ms: int, to_ms: int, every_ms: int = 10) -> Log:
        for end_ms in range(from_ms, to_ms, every_ms):
            self.add(client, end_ms)
        return self


def seed_log() -> Log:
    """The seed lab in miniature: steady writes, one error per worker, a stall to +1600 ms."""
    log = Log()
    for c in range(WORKERS):
        log.ok(c, -2000, 400)
        log.add(c, 400 + c, Outcome.FAILED)
        log.ok(c, 1600 + c, 3000)
    return log


SEED_EVENTS = [
    event("inject", 0),
    event("detect", 1000),
    event("promote_start", 1000),
    event("promote_done", 1080.5),
    event("rewire_start", 1090),
    event("rewire_done", 1150),
]


def metrics_of(log: Log, events: list[Event] | None = None, **kwargs: int) -> FailoverMetrics:
    return compute_failover_metrics(log.records, events or [], inject_us=INJECT_US, **kwargs)


# --- the seed and its variants ---------------------------------------------------------


def test_seed_reproduced() -> None:
    m = metrics_of(seed_log(), SEED_EVENTS)
    assert m.writes_resume_ms == 1600
    assert m.error_count_post_inject == 8
    assert (m.in_flight_errors, m.retry_errors) == (8, 0)
    assert (m.workers, m.workers_lost, m.connections_survived) == (8, 0, 8)
    assert m.total_ok_pre_inject == 8 * 200
    assert m.indeterminate_commits == m.connect_failures == 0


def test_seed_ok_post_inject_counts_both_sides_of_the_stall() -> None:
    m = metrics_of(seed_log())
    after_stall = sum(len(range(1600 + c, 3000, 10)) for c in range(WORKERS))
    assert m.ok_post_inject == 8 * 40 + after_stall


def test_no_disruption_gives_minus_one() -> None:
    log = Log()
    for c in range(WORKERS):
        log.ok(c, -1000, 2000)
    assert metrics_of(log).writes_resume_ms == -1


def test_never_resolved_gives_none() -> None:
    log = Log()
    for c in range(WORKERS):
        log.ok(c, -1000, 400).add(c, 400, Outcome.FAILED)
    m = metrics_of(log, until_us=at(3000))
    assert m.writes_resume_ms is None
    assert m.workers_lost == WORKERS


def test_empty_window_gives_none() -> None:
    log = Log().ok(0, -1000, 0)
    assert metrics_of(log).writes_resume_ms is None


def test_errors_without_stall_resume_at_next_clean_bucket() -> None:
    log = Log()
    for c in range(WORKERS):
        log.ok(c, -1000, 2000)
    log.add(3, 250, Outcome.FAILED)
    m = metrics_of(log)
    assert m.writes_resume_ms == 300
    assert (m.error_count_post_inject, m.in_flight_errors, m.workers_lost) == (1, 1, 0)


def test_resume_must_be_strictly_after_the_disrupted_bucket() -> None:
    # Bucket 0 is both the first disrupted bucket and has ok>0; only a LATER clean
    # bucket counts as the resume.
    log = Log().ok(0, 0, 50).add(1, 20, Outcome.FAILED).ok(0, 100, 200)
    assert metrics_of(log).writes_resume_ms == 100


def test_fail_fast_proxy_separates_in_flight_from_retry_errors() -> None:
    log = Log()
    retries = range(450, 1200, 50)
    for c in range(WORKERS):
        log.ok(c, -1000, 400).add(c, 400, Outcome.FAILED, broken=True)
        for t in retries:
            log.add(c, t, Outcome.CONNECT_FAILED)
        log.ok(c, 1200, 2000)
    m = metrics_of(log)
    assert m.in_flight_errors == WORKERS
    assert m.retry_errors == WORKERS * len(retries)
    assert m.connect_failures == WORKERS * len(retries)
    assert m.error_count_post_inject == m.in_flight_errors + m.retry_errors
    assert m.writes_resume_ms == 1200
    assert (m.workers_lost, m.connections_survived) == (0, 0)


def test_error_after_a_pre_inject_error_is_a_retry() -> None:
    log = Log().ok(0, -1000, -10).add(0, -5, Outcome.FAILED).add(0, 5, Outcome.FAILED)
    m = metrics_of(log.ok(0, 100, 500))
    assert (m.in_flight_errors, m.retry_errors, m.error_count_post_inject) == (0, 1, 1)


def test_worker_lost_after_resuming() -> None:
    log = Log()
    for c in range(WORKERS):
        log.ok(c, -1000, 400).add(c, 400, Outcome.FAILED)
        log.ok(c, 1600, 1700 if c == 0 else 3000)
    log.add(0, 1700, Outcome.FAILED)  # worker 0 fails again after resuming, then stops
    m = metrics_of(log, SEED_EVENTS, until_us=at(3000))
    assert m.workers_lost == 1
    assert m.reconnect_ms_max == 450.0  # worker 0 did reconnect once after rewire_done


def test_worker_that_never_reconnects() -> None:
    log = Log()
    for c in range(WORKERS):
        log.ok(c, -1000, 400).add(c, 400, Outcome.FAILED)
        if c != 0:
            log.ok(c, 1600, 2000)
    m = metrics_of(log, SEED_EVENTS)
    assert m.workers_lost == 1
    assert m.reconnect_ms_max is None  # unbounded: one worker never came back
    assert m.reconnect_ms_median == 450.0


def test_indeterminate_and_broken_connections() -> None:
    log = seed_log()
    log.add(0, 410, Outcome.INDETERMINATE, broken=True)
    m = metrics_of(log)
    assert m.indeterminate_commits == 1
    assert m.error_count_post_inject == 9
    assert m.retry_errors == 1
    assert m.connections_survived == WORKERS - 1


def test_configured_workers_counts_idle_workers_as_survived() -> None:
    m = metrics_of(seed_log(), workers=10)
    assert (m.workers, m.connections_survived) == (10, 10)


@pytest.mark.parametrize("workers", [0, -1])
def test_workers_must_be_positive(workers: int) -> None:
    with pytest.raises(PghaConfigError, match="workers"):
        metrics_of(seed_log(), workers=workers)


def test_until_us_cuts_the_window() -> None:
    m = metrics_of(seed_log(), until_us=at(1000))
    assert m.writes_resume_ms is None
    assert m.ok_post_inject == 8 * 40


def test_bucket_width_changes_resolution() -> None:
    # 500 ms buckets: the errors share bucket 0 with successes, 1600 falls in bucket 3
    assert metrics_of(seed_log(), bucket_ms=500).writes_resume_ms == 1500
    assert metrics_of(seed_log(), bucket_ms=10).writes_resume_ms == 1600


# --- buckets ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, 9, 1001, 10.5, True, "100"])
def test_bucket_width_is_validated(bad: object) -> None:
    with pytest.raises(PghaConfigError, match="bucket_ms"):
        validate_bucket_ms(bad)  # type: ignore[arg-type]
    with pytest.raises(PghaConfigError, match="bucket_ms"):
        post_inject_buckets([], inject_us=INJECT_US, bucket_ms=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("good", [10, 100, 1000])
def test_bucket_width_limits_are_inclusive(good: int) -> None:
    assert validate_bucket_ms(good) == good


def test_post_inject_buckets_are_contiguous_with_empty_ones() -> None:
    buckets = post_inject_buckets(seed_log().records, inject_us=INJECT_US)
    assert [b.index for b in buckets] == list(range(30))
    assert [b.start_ms for b in buckets[:3]] == [0, 100, 200]
    assert all(b.ok == b.err == 0 for b in buckets[5:16])
    assert (buckets[4].ok, buckets[4].err) == (0, 8)


def test_until_us_adds_trailing_empty_buckets_and_is_exclusive() -> None:
    log = Log().ok(0, 0, 100).add(0, 500)
    buckets = post_inject_buckets(log.records, inject_us=INJECT_US, until_us=at(500))
    assert len(buckets) == 5
    assert sum(b.ok for b in buckets) == 10


def test_pre_inject_buckets_have_negative_indexes() -> None:
    buckets = pre_inject_buckets(
        seed_log().records, inject_us=INJECT_US, since_us=at(-1000), bucket_ms=100
    )
    assert [b.index for b in buckets] == list(range(-10, 0))
    assert buckets[0].start_ms == -1000
    assert all(b.ok == 80 and b.err == 0 for b in buckets)


def test_pre_inject_buckets_empty_when_since_is_not_before_inject() -> None:
    assert pre_inject_buckets(seed_log().records, inject_us=INJECT_US, since_us=INJECT_US) == []


# --- phase attribution -----------------------------------------------------------------


def test_phase_attribution() -> None:
    m = metrics_of(seed_log(), SEED_EVENTS)
    assert (m.detect_ms, m.promote_ms, m.rewire_ms, m.ready_ms) == (1000.0, 80.5, 60.0, 1150.0)
    # reconnect from rewire_done (+1150) to each worker's first OK at +1600+c
    assert m.reconnect_ms_max == 457.0
    assert m.reconnect_ms_median == 453.5


def test_recovery_is_the_stall_after_the_detection() -> None:
    # Writes resume in the bucket at +1600; the HA manager declared the primary dead
    # at +1000: the stack itself took 600 ms.
    assert metrics_of(seed_log(), SEED_EVENTS).recovery_ms == 600.0
    assert metrics_of(seed_log(), [event("detect", 1234.5)]).recovery_ms == 365.5


def test_recovery_without_detection_or_resume_or_disruption() -> None:
    assert metrics_of(seed_log(), []).recovery_ms is None
    never = Log().ok(0, -1000, 0).add(0, 50, Outcome.FAILED)
    assert metrics_of(never, [event("detect", 10)], until_us=at(2000)).recovery_ms is None
    steady = Log().ok(0, -1000, 1000)
    assert metrics_of(steady, [event("detect", 10)]).recovery_ms == -1


def test_missing_phase_events_give_none() -> None:
    m = metrics_of(seed_log(), [event("detect", 900)])
    assert m.detect_ms == 900.0
    assert m.promote_ms is m.rewire_ms is m.ready_ms is None
    assert m.reconnect_ms_max == 1607.0  # falls back to the inject


def test_ready_falls_back_to_promote_done() -> None:
    events = [event("promote_start", 1000), event("promote_done", 1100)]
    m = metrics_of(seed_log(), events)
    assert (m.ready_ms, m.rewire_ms) == (1100.0, None)
    assert m.reconnect_ms_max == 507.0


def test_events_before_the_inject_are_ignored() -> None:
    events = [event("promote_start", -5000), event("promote_done", -4900), *SEED_EVENTS]
    assert metrics_of(seed_log(), events).promote_ms == 80.5


# --- JSON and docs ---------------------------------------------------------------------


def test_to_json_is_plain_json() -> None:
    m = metrics_of(seed_log(), SEED_EVENTS)
    data = m.to_json()
    assert json.loads(json.dumps(data)) == data
    assert set(data) == {f.name for f in dataclasses.fields(FailoverMetrics)}
    assert data["writes_resume_ms"] == 1600 and data["bucket_ms"] == 100


# --- server-side commit gap --------------------------------------------------------------


def test_first_commit_after_the_promotion() -> None:
    # A commit that the old primary made after the inject (its backends outlive a
    # SIGKILLed postmaster for a moment) is not the new primary's.
    times = [at(t) for t in (-100, 5, 1500, 1510)]
    assert first_commit_after_ms(times, after_us=at(1100), inject_us=at(0)) == 1500.0
    assert first_commit_after_ms(times, after_us=at(2000), inject_us=at(0)) is None


def test_commit_gap_spanning_the_inject() -> None:
    times = [at(t) for t in (-300, -200, -100, 1500, 1510, 1520)]
    assert largest_commit_gap_ms(times, around_us=at(0), window_us=5_000_000) == 1600.0


def test_commit_gap_before_the_inject_is_ignored() -> None:
    times = [at(t) for t in (-3000, -100, 0.5, 10, 20.25)]
    gap = largest_commit_gap_ms(times, around_us=at(0), window_us=5_000_000)
    assert gap == 100.5


def test_commit_gap_ignores_duplicates_and_commits_outside_the_window() -> None:
    times = [at(t) for t in (-2000, -10, -10, 40, 40, 2000)]
    assert largest_commit_gap_ms(times, around_us=at(0), window_us=1_000_000) == 50.0


def test_commit_gap_none_without_commits_after() -> None:
    times = [at(t) for t in (-300, -200)]
    assert largest_commit_gap_ms(times, around_us=at(0), window_us=1_000_000) is None
    assert largest_commit_gap_ms([], around_us=at(0), window_us=1_000_000) is None


def test_commit_gap_window_must_be_positive() -> None:
    with pytest.raises(PghaConfigError, match="window_us"):
        largest_commit_gap_ms([1, 2], around_us=1, window_us=0)


def test_commit_times_sql() -> None:
    assert "pg_xact_commit_timestamp(xmin)" in COMMIT_TIMES_SQL
    assert "pgbench_accounts" in COMMIT_TIMES_SQL
    assert "IS NOT NULL" in COMMIT_TIMES_SQL
    assert "pg_current_wal_lsn" not in COMMIT_TIMES_SQL


# --- properties of bucketing -------------------------------------------------------------

random_records = st.lists(
    st.builds(
        lambda client, end, outcome: TxRecord(client, 0, end - 1, end, outcome),
        st.integers(0, 7),
        st.integers(INJECT_US - 500_000, INJECT_US + 3_000_000),
        st.sampled_from(Outcome),
    ),
    max_size=200,
)
widths = st.integers(10, 1000)


def post(records: list[TxRecord]) -> list[TxRecord]:
    return [r for r in records if r.end_us >= INJECT_US]


@given(random_records, widths)
def test_every_post_inject_record_lands_in_exactly_one_bucket(
    records: list[TxRecord], width: int
) -> None:
    buckets = post_inject_buckets(records, inject_us=INJECT_US, bucket_ms=width)
    for record in post(records):
        offset_ms = (record.end_us - INJECT_US) / 1000
        holders = [b for b in buckets if b.start_ms <= offset_ms < b.start_ms + width]
        assert len(holders) == 1


@given(random_records, widths)
def test_bucket_sums_equal_counts(records: list[TxRecord], width: int) -> None:
    buckets = post_inject_buckets(records, inject_us=INJECT_US, bucket_ms=width)
    assert sum(b.ok for b in buckets) == sum(r.outcome is Outcome.OK for r in post(records))
    assert sum(b.err for b in buckets) == sum(r.outcome.is_error for r in post(records))
    assert [b.index for b in buckets] == list(range(len(buckets)))


@given(random_records, widths, st.integers(INJECT_US - 2_000_000, INJECT_US - 1))
def test_pre_inject_sums_equal_counts(records: list[TxRecord], width: int, since: int) -> None:
    buckets = pre_inject_buckets(records, inject_us=INJECT_US, since_us=since, bucket_ms=width)
    pre = [r for r in records if since <= r.end_us < INJECT_US]
    assert sum(b.ok + b.err for b in buckets) == len(pre)
    assert buckets[-1].index == -1


@given(st.integers(-(10**9), 10**9), st.integers(-(10**9), 10**9), widths)
def test_bucket_index_is_monotone_in_end_time(a: int, b: int, width: int) -> None:
    early, late = sorted((a, b))
    assert bucket_index(early, inject_us=0, bucket_ms=width) <= bucket_index(
        late, inject_us=0, bucket_ms=width
    )


@given(random_records, widths, widths)
def test_bucket_width_never_changes_totals(records: list[TxRecord], w1: int, w2: int) -> None:
    def totals(width: int) -> tuple[int, int]:
        buckets = post_inject_buckets(records, inject_us=INJECT_US, bucket_ms=width)
        return sum(b.ok for b in buckets), sum(b.err for b in buckets)

    assert totals(w1) == totals(w2)


@given(random_records, widths)
def test_writes_resume_ms_is_a_bucket_multiple_or_sentinel(
    records: list[TxRecord], width: int
) -> None:
    resume = compute_failover_metrics(
        records, [], inject_us=INJECT_US, bucket_ms=width
    ).writes_resume_ms
    assert resume in (-1, None) or (resume > 0 and resume % width == 0)


@given(random_records, widths)
def test_writes_resume_ms_is_minus_one_iff_every_bucket_is_clean(
    records: list[TxRecord], width: int
) -> None:
    buckets = post_inject_buckets(records, inject_us=INJECT_US, bucket_ms=width)
    resume = compute_failover_metrics(
        records, [], inject_us=INJECT_US, bucket_ms=width
    ).writes_resume_ms
    # An empty window is not "no disruption": nothing shows writes working.
    all_clean = bool(buckets) and all(b.ok > 0 and b.err == 0 for b in buckets)
    assert (resume == -1) == all_clean


@given(random_records)
def test_error_split_and_ok_split_add_up(records: list[TxRecord]) -> None:
    m = compute_failover_metrics(records, [], inject_us=INJECT_US)
    assert m.in_flight_errors + m.retry_errors == m.error_count_post_inject
    assert m.total_ok_pre_inject + m.ok_post_inject == sum(r.outcome is Outcome.OK for r in records)
    assert 0 <= m.workers_lost <= m.workers and 0 <= m.connections_survived <= m.workers
