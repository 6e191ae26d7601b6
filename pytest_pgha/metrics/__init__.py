"""What a trial cost, computed from the transaction log and the event timeline. Importing
the package fills the metric catalog with every built-in metric."""

from pytest_pgha.metrics.buckets import Bucket, post_inject_buckets, pre_inject_buckets
from pytest_pgha.metrics.catalog import CATALOG, Metric, MetricCatalog, register_metric
from pytest_pgha.metrics.durability import DurabilityFigures, Verdict, resolve
from pytest_pgha.metrics.failover import FailoverMetrics, compute_failover_metrics
from pytest_pgha.metrics.reads import read_path_metrics
from pytest_pgha.metrics.restart import ProbeReport, summarise
from pytest_pgha.metrics.server_gap import COMMIT_TIMES_SQL, largest_commit_gap_ms
from pytest_pgha.metrics.staleness import EndpointStaleness, staleness

__all__ = [
    "CATALOG",
    "COMMIT_TIMES_SQL",
    "Bucket",
    "DurabilityFigures",
    "EndpointStaleness",
    "FailoverMetrics",
    "Metric",
    "MetricCatalog",
    "ProbeReport",
    "Verdict",
    "compute_failover_metrics",
    "largest_commit_gap_ms",
    "post_inject_buckets",
    "pre_inject_buckets",
    "read_path_metrics",
    "register_metric",
    "resolve",
    "staleness",
    "summarise",
]
