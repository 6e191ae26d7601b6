"""The read path's figures when a replica is lost: the read workload's log, computed
like a failover's, under names of their own."""

from __future__ import annotations

from pytest_pgha.metrics.catalog import register_metric
from pytest_pgha.metrics.failover import BUCKET, FailoverMetrics

register_metric(
    "reads_resume_ms",
    unit="ms",
    meaning="writes_resume_ms computed on the read workload's log",
    precision=BUCKET,
    group="read path",
    minus_one_is_undisrupted=True,
    timed=True,
)
register_metric(
    "read_error_count",
    unit="count",
    meaning="read attempts that failed after the inject",
    precision="exact",
    group="read path",
)
register_metric(
    "reads_ok_post_inject",
    unit="count",
    meaning="successful reads after the inject, in the window",
    precision="exact",
    group="read path",
)


def read_path_metrics(reads: FailoverMetrics) -> dict[str, int | float | None]:
    return {
        "reads_resume_ms": reads.writes_resume_ms,
        "read_error_count": reads.error_count_post_inject,
        "reads_ok_post_inject": reads.ok_post_inject,
    }
