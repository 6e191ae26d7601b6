"""The restart-window prober of ProxySQL's "faster restart" article: connect, run one
query, disconnect, every interval (2 ms there), and histogram the latencies. Failed
probes while the proxy is down give its unavailable milliseconds."""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Protocol

import psycopg

from pytest_pgha.errors import PghaConfigError, PghaError
from pytest_pgha.lag import prioritise


class EventLike(Protocol):
    def set(self) -> None: ...
    def is_set(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> bool: ...


@dataclass(frozen=True, slots=True)
class Probe:
    start_us: int
    end_us: int
    ok: bool


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
