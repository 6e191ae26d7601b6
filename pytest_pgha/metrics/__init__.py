"""Failover metrics computed from the transaction log and the event timeline."""

from pytest_pgha.metrics.buckets import Bucket, post_inject_buckets, pre_inject_buckets
from pytest_pgha.metrics.failover import (
    METRIC_DOCS,
    METRIC_NAMES,
    FailoverMetrics,
    compute_failover_metrics,
)
from pytest_pgha.metrics.server_gap import COMMIT_TIMES_SQL, largest_commit_gap_ms

__all__ = [
    "COMMIT_TIMES_SQL",
    "METRIC_DOCS",
    "METRIC_NAMES",
    "Bucket",
    "FailoverMetrics",
    "compute_failover_metrics",
    "largest_commit_gap_ms",
    "post_inject_buckets",
    "pre_inject_buckets",
]
