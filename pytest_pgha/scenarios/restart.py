"""The proxy restart window, as in ProxySQL's "faster restart" article: a prober
connects, queries and disconnects every 2 ms while the proxy is SIGKILLed and started
again; the failed probes give how long the endpoint was unavailable."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.faults.inject import crash_proxy, restart_proxy
from pytest_pgha.metrics.restart import ProbeReport, summarise
from pytest_pgha.metrics.values import Measured, MetricValues
from pytest_pgha.proxies.samples import ProxySample
from pytest_pgha.scenarios.protocol import check_window, short_repr
from pytest_pgha.scenarios.stack import Stack
from pytest_pgha.timeline import Event
from pytest_pgha.workload.prober import ConnectProber, Probe
from pytest_pgha.workload.records import TxRecord


@dataclass(frozen=True)
class RestartPlan:
    # The prober's pace: one connect + query + disconnect per interval.
    probe_interval_s: float = 0.002
    warmup_s: float = 1.0
    settle_s: float = 1.0
    # Plays the angel process: how long after the crash the proxy is started again
    # (0: at once, like ProxySQL's watchdog parent).
    restart_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0.001 <= self.probe_interval_s <= 1:
            raise PghaConfigError.invalid(
                "restart_window probe_interval_s", self.probe_interval_s, "use 0.001..1 seconds"
            )
        check_window("restart_window", warmup_s=self.warmup_s, settle_s=self.settle_s, least_s=0.1)
        if not 0 <= self.restart_delay_s <= 60:
            raise PghaConfigError.invalid(
                "restart_window restart_delay_s", self.restart_delay_s, "use 0..60 seconds"
            )


@dataclass(repr=False)
class RestartResult:
    scenario: ClassVar[str] = "restart_window"

    plan: RestartPlan
    proxy_kind: str
    probes: list[Probe]
    events: list[Event]
    inject: Event
    report: ProbeReport
    restart_ms: float  # from the SIGKILL to the proxy listening again
    added_metrics: dict[str, Measured] = field(default_factory=dict)

    @property
    def metrics(self) -> MetricValues:
        figures = self.report.to_json()
        figures.pop("histogram_ms")
        return MetricValues({**figures, "restart_ms": self.restart_ms, **self.added_metrics})

    @property
    def parameters(self) -> dict[str, object]:
        return {
            "proxy": self.proxy_kind,
            "fault": "crash_proxy",
            "probe_interval_ms": self.plan.probe_interval_s * 1000,
            "restart_delay_s": self.plan.restart_delay_s,
        }

    @property
    def records(self) -> list[TxRecord]:
        return []

    @property
    def samples(self) -> list[ProxySample]:
        return []

    @property
    def bucket_ms(self) -> int:
        return 100

    def attachments(self) -> dict[str, str]:
        return {}

    def details(self) -> dict[str, Any]:
        return {"histogram_ms": self.report.histogram}

    def __repr__(self) -> str:
        return short_repr(self)


def run_restart_window(stack: Stack, plan: RestartPlan) -> RestartResult:
    prober = ConnectProber(
        stack.proxy.dsn(stack.proxy.settings.listen_port, connect_timeout=2),
        plan.probe_interval_s,
    )
    with prober:
        time.sleep(plan.warmup_s)
        inject = crash_proxy(stack.proxy, stack.timeline)
        time.sleep(plan.restart_delay_s)
        done = restart_proxy(stack.proxy, stack.timeline)
        time.sleep(plan.settle_s)
    restart_ms = (done.epoch_us - inject.epoch_us) / 1000
    return RestartResult(
        plan,
        stack.proxy.kind,
        prober.probes,
        stack.timeline.events,
        inject,
        summarise(prober.probes, inject.epoch_us),
        round(restart_ms, 1),
    )
