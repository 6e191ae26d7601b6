"""Stale reads judged from a writer's and a reader's logs (pure, no server)."""

from __future__ import annotations

import pytest

from pytest_pgha.metrics.staleness import Percentiles, staleness
from pytest_pgha.workload.stale_reads import Read, Write

# Values 1..5 acknowledged every 10 ms from t=1000 us, each commit 100 bytes further.
WRITES = [Write(v, 1000 + (v - 1) * 10_000, 5000 + v * 100) for v in range(1, 6)]


def test_a_read_that_saw_the_last_acknowledged_value_is_fresh() -> None:
    report = staleness(WRITES, [Read("replica", 21_001, 3, 5300)])["replica"]
    assert (report.reads, report.stale) == (1, 0)
    assert report.staleness_ms == Percentiles(None, None, None)


def test_a_stale_read_is_timed_from_the_oldest_write_it_missed() -> None:
    """Started at 41.5 ms, it saw 2: value 3 (acked at 21 ms) is the oldest it missed,
    20.5 ms before, and the node's replay trailed its commit by 100 bytes."""
    report = staleness(WRITES, [Read("replica", 41_500, 2, 5200)])["replica"]
    assert report.stale == 1 and report.stale_read_pct == 100.0
    assert report.staleness_ms == Percentiles(20.5, 20.5, 20.5)
    assert report.staleness_bytes == Percentiles(100.0, 100.0, 100.0)


def test_writes_acknowledged_after_the_read_began_do_not_count() -> None:
    # Value 5 was acknowledged at 41 ms; a read that began at 40 ms and saw 4 is fresh.
    assert staleness(WRITES, [Read("replica", 40_000, 4, 5400)])["replica"].stale == 0


def test_rates_and_percentiles_are_per_endpoint() -> None:
    reads = [Read("primary", 50_000, 5, None)] * 3 + [
        Read("replica", 50_000, 5, 5500),
        Read("replica", 50_000, 4, 5400),
        Read("replica", 50_000, 1, 5100),
        Read("replica", 50_000, 0, 5000),
    ]
    report = staleness(WRITES, reads)
    assert report["primary"].stale == 0 and report["primary"].reads == 3
    replica = report["replica"]
    assert (replica.reads, replica.stale, replica.stale_read_pct) == (4, 3, 75.0)
    # Missed 5 (acked 41 ms), 2 (11 ms), 1 (1 ms): 9, 39, 49 ms before the read.
    assert replica.staleness_ms == Percentiles(39.0, 49.0, 49.0)
    assert replica.staleness_bytes == Percentiles(100.0, 100.0, 100.0)
    assert replica.to_json()["stale_read_pct"] == 75.0


def test_writes_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        staleness([WRITES[1], WRITES[0]], [])
