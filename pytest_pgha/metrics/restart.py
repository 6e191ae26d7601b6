"""The restart window's figures, from the prober's connect+query probes (ProxySQL's
"faster restart" article): how long the endpoint was unavailable, and the latency
histogram of the probes that worked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_pgha.metrics.catalog import register_metric
from pytest_pgha.workload.prober import Probe


def _restart(name: str, unit: str, meaning: str, precision: str, timed: bool = False) -> None:
    register_metric(
        name, unit=unit, meaning=meaning, precision=precision, group="restart window", timed=timed
    )


_restart(
    "unavailable_ms",
    "ms",
    "last good connect+query probe before the outage to the first good one after",
    "the probe interval (2 ms by default)",
    timed=True,
)
_restart("probes_ok", "count", "connect+query probes that worked", "exact")
_restart("probes_failed", "count", "connect+query probes that failed", "exact")
_restart(
    "first_failure_after_inject_ms",
    "ms",
    "the crash to the end of the first failed probe",
    "the probe interval",
    timed=True,
)
_restart(
    "restart_ms",
    "ms",
    "the SIGKILL to the proxy listening again",
    "~1 ms (the harness's clocks)",
    timed=True,
)

HISTOGRAM_EDGES_MS = (
    0.1,
    0.2,
    0.3,
    0.4,
    0.5,
    0.6,
    0.7,
    0.8,
    0.9,
    1.0,
    1.5,
    2.0,
    4.0,
    8.0,
    16.0,
    32.0,
    64.0,
    128.0,
    1000.0,
)


@dataclass
class ProbeReport:
    ok: int
    failed: int
    unavailable_ms: float | None  # from the last good probe before the outage to the first after
    first_failure_after_inject_ms: float | None
    histogram: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "probes_ok": self.ok,
            "probes_failed": self.failed,
            "unavailable_ms": self.unavailable_ms,
            "first_failure_after_inject_ms": self.first_failure_after_inject_ms,
            "histogram_ms": self.histogram,
        }


def summarise(probes: list[Probe], inject_us: int) -> ProbeReport:
    failed = [p for p in probes if not p.ok]
    histogram = _histogram([(p.end_us - p.start_us) / 1000 for p in probes if p.ok])
    if not failed:
        return ProbeReport(len(probes), 0, 0.0, None, histogram)
    first_fail = failed[0]
    last_fail = failed[-1]
    good_before = [p for p in probes if p.ok and p.end_us <= first_fail.start_us]
    good_after = [p for p in probes if p.ok and p.start_us >= last_fail.end_us]
    start = good_before[-1].end_us if good_before else first_fail.start_us
    unavailable = (good_after[0].end_us - start) / 1000 if good_after else None
    return ProbeReport(
        len(probes) - len(failed),
        len(failed),
        unavailable,
        (first_fail.end_us - inject_us) / 1000,
        histogram,
    )


def _histogram(latencies_ms: list[float]) -> dict[str, int]:
    counts: dict[str, int] = {}
    lower = 0.0
    for edge in HISTOGRAM_EDGES_MS:
        label = f"[{lower:g}ms, {edge:g}ms)"
        counts[label] = sum(1 for x in latencies_ms if lower <= x < edge)
        lower = edge
    counts[f"[{lower:g}ms, inf)"] = sum(1 for x in latencies_ms if x >= lower)
    return {k: v for k, v in counts.items() if v}
