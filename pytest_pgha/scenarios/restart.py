"""The proxy restart window, as in ProxySQL's "faster restart" article: a prober
connects, queries and disconnects every 2 ms while the proxy is SIGKILLed and started
again; the failed probes give how long the endpoint was unavailable."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pytest_pgha.faults.inject import crash_proxy, restart_proxy
from pytest_pgha.metrics.restart import ProbeReport, summarise
from pytest_pgha.scenarios.stack import Stack
from pytest_pgha.timeline import Event
from pytest_pgha.workload.prober import ConnectProber, Probe


@dataclass
class RestartResult:
    proxy_kind: str
    probes: list[Probe]
    events: list[Event]
    inject: Event
    report: ProbeReport
    restart_ms: float  # from the SIGKILL to the proxy listening again

    def metrics_json(self) -> dict[str, Any]:
        return {**self.report.to_json(), "restart_ms": self.restart_ms}


def run_restart_window(
    stack: Stack,
    *,
    interval_s: float = 0.002,
    before_s: float = 1.0,
    after_s: float = 1.0,
    restart_delay_s: float = 0.0,
) -> RestartResult:
    """restart_delay_s plays the angel process: how long after the crash the proxy is
    started again (0: at once, like ProxySQL's watchdog parent)."""
    prober = ConnectProber(
        stack.proxy.dsn(stack.proxy.settings.listen_port, connect_timeout=2), interval_s
    )
    with prober:
        time.sleep(before_s)
        inject = crash_proxy(stack.proxy, stack.timeline)
        time.sleep(restart_delay_s)
        done = restart_proxy(stack.proxy, stack.timeline)
        time.sleep(after_s)
    restart_ms = (done.epoch_us - inject.epoch_us) / 1000
    return RestartResult(
        stack.proxy.kind,
        prober.probes,
        stack.timeline.events,
        inject,
        summarise(prober.probes, inject.epoch_us),
        round(restart_ms, 1),
    )
