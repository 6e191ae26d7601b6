"""A replica dies while writes go to the primary and reads go through the proxy's
read path: writes must not notice, reads must come back on the remaining replicas."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.faults.inject import kill_replica
from pytest_pgha.metrics.failover import FailoverMetrics, compute_failover_metrics
from pytest_pgha.metrics.reads import read_path_metrics
from pytest_pgha.metrics.values import Measured, MetricValues
from pytest_pgha.proxies.samples import ProxySample
from pytest_pgha.scenarios.protocol import check_load, check_window, short_repr
from pytest_pgha.scenarios.stack import Stack
from pytest_pgha.timeline import Event
from pytest_pgha.workload.driver import WorkloadDriver, WorkloadOptions
from pytest_pgha.workload.records import TxRecord


@dataclass(frozen=True)
class ReplicaLossPlan:
    workers: int = 4
    rate: float | None = None
    warmup_s: float = 1.5
    settle_s: float = 2.0
    bucket_ms: int = 100
    # The replica to kill, by node name; None: the first.
    replica: str | None = None
    # After the fault, wait up to this long for every write and read worker to commit
    # again, then settle_s more (as a failover trial does): a proxy that stalls on a
    # lost standby shows as a late resume, not as lost workers.
    recovery_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        check_load("replica_loss", workers=self.workers, rate=self.rate)
        check_window("replica_loss", warmup_s=self.warmup_s, settle_s=self.settle_s, least_s=0.5)


@dataclass(repr=False)
class ReplicaLossResult:
    """`metrics`: the write workload's failover figures and the read path's; `writes`
    and `reads` the two workloads' figures as typed FailoverMetrics."""

    scenario: ClassVar[str] = "replica_loss"

    plan: ReplicaLossPlan
    proxy_kind: str
    writes: FailoverMetrics
    reads: FailoverMetrics
    write_records: list[TxRecord]
    read_records: list[TxRecord]
    events: list[Event]
    inject: Event
    added_metrics: dict[str, Measured] = field(default_factory=dict)

    @property
    def metrics(self) -> MetricValues:
        figures = self.writes.to_json()
        figures.pop("bucket_ms")
        return MetricValues({**figures, **read_path_metrics(self.reads), **self.added_metrics})

    @property
    def parameters(self) -> dict[str, object]:
        return {
            "proxy": self.proxy_kind,
            "fault": "kill_replica",
            "workers": self.plan.workers,
            "rate": self.plan.rate or "unthrottled",
        }

    @property
    def records(self) -> list[TxRecord]:
        # The chart shows the read path: what this scenario is about.
        return self.read_records

    @property
    def samples(self) -> list[ProxySample]:
        return []

    @property
    def bucket_ms(self) -> int:
        return self.plan.bucket_ms

    def attachments(self) -> dict[str, str]:
        return {}

    def details(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        return short_repr(self)


def run_replica_loss(stack: Stack, plan: ReplicaLossPlan) -> ReplicaLossResult:
    read_dsn = stack.proxy.ro_dsn
    if read_dsn is None:
        raise PghaConfigError(f"{stack.proxy.kind} has no read path to test replica loss on")
    scale = stack.cluster.spec.scale
    options = WorkloadOptions(workers=plan.workers, scale=scale, rate=plan.rate)
    writer = WorkloadDriver(stack.proxy.rw_dsn, options)
    reader = WorkloadDriver(
        read_dsn,
        WorkloadOptions(workers=plan.workers, scale=scale, rate=plan.rate, mode="read"),
    )
    with writer, reader:
        time.sleep(plan.warmup_s)
        inject = kill_replica(stack.cluster, stack.timeline, plan.replica)
        _await_recovery((writer, reader), plan, inject.epoch_us)
        time.sleep(plan.settle_s)
        until_us = time.time_ns() // 1000
    events = stack.timeline.events

    def metrics(records: list[TxRecord]) -> FailoverMetrics:
        return compute_failover_metrics(
            records,
            events,
            inject_us=inject.epoch_us,
            bucket_ms=plan.bucket_ms,
            until_us=until_us,
            workers=plan.workers,
        )

    writes, reads = writer.records(), reader.records()
    return ReplicaLossResult(
        plan, stack.proxy.kind, metrics(writes), metrics(reads), writes, reads, events, inject
    )


def _await_recovery(
    drivers: tuple[WorkloadDriver, ...], plan: ReplicaLossPlan, since_us: int
) -> None:
    """Until every worker of every driver committed after since_us, at most
    recovery_timeout_s."""
    deadline = time.monotonic() + plan.recovery_timeout_s
    while time.monotonic() < deadline and any(
        d.workers_recovered(since_us) < plan.workers for d in drivers
    ):
        time.sleep(0.02)
