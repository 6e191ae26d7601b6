"""A replica dies while writes go to the primary and reads go through the proxy's
read path: writes must not notice, reads must come back on the remaining replicas."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.faults.inject import kill_replica
from pytest_pgha.metrics.failover import FailoverMetrics, compute_failover_metrics
from pytest_pgha.metrics.reads import read_path_metrics
from pytest_pgha.scenarios.stack import Stack
from pytest_pgha.timeline import Event
from pytest_pgha.workload.driver import WorkloadDriver, WorkloadOptions
from pytest_pgha.workload.records import TxRecord


@dataclass
class ReplicaLossResult:
    proxy_kind: str
    writes: FailoverMetrics
    reads: FailoverMetrics
    write_records: list[TxRecord]
    read_records: list[TxRecord]
    events: list[Event]
    inject: Event

    def metrics_json(self) -> dict[str, Any]:
        return {
            **self.writes.to_json(),
            **read_path_metrics(self.reads),
        }


def run_replica_loss(
    stack: Stack,
    *,
    workers: int = 4,
    rate: float | None = None,
    warmup_s: float = 1.5,
    settle_s: float = 2.0,
    bucket_ms: int = 100,
) -> ReplicaLossResult:
    read_dsn = stack.proxy.ro_dsn
    if read_dsn is None:
        raise PghaConfigError(f"{stack.proxy.kind} has no read path to test replica loss on")
    scale = stack.cluster.spec.scale
    writer = WorkloadDriver(
        stack.proxy.rw_dsn, WorkloadOptions(workers=workers, scale=scale, rate=rate)
    )
    reader = WorkloadDriver(
        read_dsn, WorkloadOptions(workers=workers, scale=scale, rate=rate, mode="read")
    )
    with writer, reader:
        time.sleep(warmup_s)
        inject = kill_replica(stack.cluster, stack.timeline)
        time.sleep(settle_s)
        until_us = time.time_ns() // 1000
    events = stack.timeline.events

    def metrics(records: list[TxRecord]) -> FailoverMetrics:
        return compute_failover_metrics(
            records,
            events,
            inject_us=inject.epoch_us,
            bucket_ms=bucket_ms,
            until_us=until_us,
            workers=workers,
        )

    writes, reads = writer.records(), reader.records()
    return ReplicaLossResult(
        stack.proxy.kind, metrics(writes), metrics(reads), writes, reads, events, inject
    )
