"""One failover trial, the failover lab's experiment: the workload runs through the
proxy, a fault hits the primary, the HA manager detects / decides / promotes /
rewires, the workload keeps reconnecting, and the logs come back."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.faults.inject import FAULTS
from pytest_pgha.ha.scripted import DetectPolicy, RewirePath, ScriptedHA
from pytest_pgha.metrics.failover import FailoverMetrics, compute_failover_metrics
from pytest_pgha.metrics.server_gap import COMMIT_TIMES_SQL, largest_commit_gap_ms
from pytest_pgha.proxies.sampler import Sampler
from pytest_pgha.report.samples import ProxySample
from pytest_pgha.scenarios.stack import Stack
from pytest_pgha.timeline import Event
from pytest_pgha.workload.driver import WorkloadDriver, WorkloadOptions
from pytest_pgha.workload.records import TxRecord


@dataclass(frozen=True)
class TrialPlan:
    """What one trial does. Short by default (seconds, not the lab's 90 s)."""

    fault: str = "kill_primary"
    detect_delay_s: float | None = 1.0
    probe_interval_s: float | None = None
    rewire: RewirePath = "explicit"
    workers: int = 8
    rate: float | None = None
    warmup_s: float = 2.0
    settle_s: float = 2.0
    bucket_ms: int = 100
    failover_timeout_s: float = 60.0
    # The workload's client-side statement timeout: what unblocks a worker stuck on a
    # frozen server (the kernel keeps ACKing, so TCP never fails by itself).
    statement_timeout_s: float | None = 5.0
    # After the HA manager finished, wait up to this long for every worker to commit
    # again, then settle_s more: short trials when the stack recovers fast, the whole
    # tail when it does not.
    recovery_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise PghaConfigError.invalid("fault", self.fault, f"use one of {', '.join(FAULTS)}")
        if self.warmup_s < 0.5 or self.settle_s < 0.5:
            raise PghaConfigError.invalid(
                "warmup_s/settle_s",
                (self.warmup_s, self.settle_s),
                "give the workload at least 0.5 s before and after",
            )

    def detect_policy(self) -> DetectPolicy:
        if self.probe_interval_s is not None:
            return DetectPolicy(delay_s=None, probe_interval_s=self.probe_interval_s)
        return DetectPolicy(delay_s=self.detect_delay_s)

    def parameters(self, proxy_kind: str) -> dict[str, object]:
        detect = (
            f"probe every {self.probe_interval_s}s"
            if self.probe_interval_s is not None
            else f"{self.detect_delay_s}s"
        )
        return {
            "proxy": proxy_kind,
            "ha": "scripted",
            "fault": self.fault,
            "workers": self.workers,
            "detect": detect,
            "rewire": self.rewire,
            "rate": self.rate or "unthrottled",
        }


@dataclass
class TrialResult:
    plan: TrialPlan
    proxy_kind: str
    records: list[TxRecord]
    samples: list[ProxySample]
    events: list[Event]
    inject: Event
    metrics: FailoverMetrics
    server_write_gap_ms: float | None
    new_primary: str | None
    extra: dict[str, Any] = field(default_factory=dict)

    def metrics_json(self) -> dict[str, Any]:
        return {
            **self.metrics.to_json(),
            "server_write_gap_ms": self.server_write_gap_ms,
            **self.extra,
        }

    def parameters(self) -> dict[str, object]:
        return self.plan.parameters(self.proxy_kind)


def run_failover_trial(stack: Stack, plan: TrialPlan) -> TrialResult:
    fault, inject_fault = FAULTS[plan.fault]
    cluster, proxy, timeline = stack.cluster, stack.proxy, stack.timeline
    ha = ScriptedHA(cluster, proxy, timeline, detect=plan.detect_policy(), rewire=plan.rewire)
    driver = WorkloadDriver(
        proxy.rw_dsn,
        WorkloadOptions(
            workers=plan.workers,
            scale=cluster.spec.scale,
            rate=plan.rate,
            statement_timeout_s=plan.statement_timeout_s,
        ),
    )
    new_primary = None
    sampler = Sampler(proxy.sample, on_error=proxy.failed_sample)
    try:
        ha.prepare()
        with sampler, driver:
            # The warm-up counts from a running workload: every worker committed once.
            _await_all_workers(driver, plan, driver.started_us)
            time.sleep(plan.warmup_s)
            inject = inject_fault(cluster, timeline)
            if fault.loses_primary:
                ha.start_failover(inject, planned=fault.planned)
                new_primary = ha.wait(plan.failover_timeout_s).name
                _await_all_workers(driver, plan, time.time_ns() // 1000)
            time.sleep(plan.settle_s)
            until_us = time.time_ns() // 1000
    finally:
        ha.close()
    records = driver.records()
    events = timeline.events
    metrics = compute_failover_metrics(
        records,
        events,
        inject_us=inject.epoch_us,
        bucket_ms=plan.bucket_ms,
        until_us=until_us,
        workers=plan.workers,
    )
    gap = server_write_gap(stack, inject, until_us) if fault.loses_primary else None
    return TrialResult(
        plan, proxy.kind, records, sampler.samples, events, inject, metrics, gap, new_primary
    )


def _await_all_workers(driver: WorkloadDriver, plan: TrialPlan, since_us: int) -> None:
    """Until every worker committed after since_us, at most recovery_timeout_s."""
    deadline = time.monotonic() + plan.recovery_timeout_s
    while driver.workers_recovered(since_us) < plan.workers and time.monotonic() < deadline:
        time.sleep(0.02)


def server_write_gap(stack: Stack, inject: Event, until_us: int) -> float | None:
    """The CloudNativePG cross-check: the stall as the new primary's commit timestamps
    show it (commits replayed from the old timeline, then its own)."""
    try:
        rows = stack.cluster.primary.sql(COMMIT_TIMES_SQL)
    except Exception:  # a cross-check must not hide the trial's own result
        return None
    window = max(until_us - inject.epoch_us, 1_000_000)
    return largest_commit_gap_ms(
        [int(r[0]) for r in rows], around_us=inject.epoch_us, window_us=window
    )


def with_overrides(plan: TrialPlan, **overrides: Any) -> TrialPlan:
    unknown = set(overrides) - set(TrialPlan.__dataclass_fields__)
    if unknown:
        raise PghaConfigError.invalid(
            "trial option",
            sorted(unknown),
            f"known options: {', '.join(TrialPlan.__dataclass_fields__)}",
        )
    return replace(plan, **overrides)
