"""The restart-window prober of ProxySQL's "faster restart" article: connect, run one
query, disconnect, every interval (2 ms there), and histogram the latencies. Failed
probes while the proxy is down give its unavailable milliseconds."""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Protocol

import psycopg

from pytest_pgha.errors import PghaConfigError, PghaError
from pytest_pgha.lag import prioritise


class EventLike(Protocol):
    def set(self) -> None: ...
    def is_set(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> bool: ...


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


@dataclass(frozen=True, slots=True)
class Probe:
    start_us: int
    end_us: int
    ok: bool


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


class ConnectProber:
    """Probes from a process of its own, as the article's prober is a program of its
    own: in a thread, a probe could wait for the interpreter lock while the harness
    restarted the proxy, and a 30 ms outage went unseen under `-n 4`."""

    def __init__(self, dsn: str, interval_s: float = 0.002) -> None:
        if not 0.0005 <= interval_s <= 1.0:
            raise PghaConfigError.invalid("interval_s", interval_s, "use 0.5 ms .. 1 s")
        # spawn, not fork: the harness has threads (workload, sampler) running.
        context = multiprocessing.get_context("spawn")
        self.probes: list[Probe] = []
        self._stop = context.Event()
        self._ready = context.Event()
        self._results, sender = context.Pipe(duplex=False)
        self._process = context.Process(
            target=probe_loop,
            args=(dsn, interval_s, self._stop, self._ready, sender),
            name="pgha-prober",
            daemon=True,
        )

    def __enter__(self) -> ConnectProber:
        self._process.start()
        if not self._ready.wait(STARTUP_TIMEOUT_S):
            self._process.kill()
            self._process.join()
            raise PghaError(f"the prober process did not start in {STARTUP_TIMEOUT_S:.0f}s")
        return self

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def running(self) -> bool:
        return self._process.is_alive()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        try:
            if self._results.poll(RESULTS_TIMEOUT_S):
                self.probes = [Probe(*fields) for fields in self._results.recv()]
        finally:
            self._process.join(timeout=RESULTS_TIMEOUT_S)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
            self._results.close()


STARTUP_TIMEOUT_S = 30.0
RESULTS_TIMEOUT_S = 10.0


def probe_loop(
    dsn: str,
    interval_s: float,
    stop: EventLike,
    ready: EventLike,
    results: Connection,
) -> None:
    """The prober process: probe until told to stop (or orphaned), then send the
    probes back as tuples."""
    prioritise()
    parent = os.getppid()
    probes: list[tuple[int, int, bool]] = []
    ready.set()
    next_at = time.monotonic()
    while not stop.is_set() and os.getppid() == parent:
        probes.append(_probe(dsn))
        next_at = max(next_at + interval_s, time.monotonic() - interval_s)
        stop.wait(max(0.0, next_at - time.monotonic()))
    if os.getppid() == parent:  # an orphan has nobody to report to
        results.send(probes)
    results.close()


def _probe(dsn: str) -> tuple[int, int, bool]:
    start = time.time_ns() // 1000
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.pgconn.exec_(b"SELECT 1")
        ok = True
    except psycopg.Error:
        ok = False
    return start, time.time_ns() // 1000, ok


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
