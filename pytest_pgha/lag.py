"""The harness's own timing error: how much later than planned its actions ran.

Every wait the harness plans (the fault after the warm-up, the HA manager's detection
delay, each detection probe, each proxy sample) goes through a `LagMeter`, which
records how much later than asked the waiting thread woke up; a `Heartbeat` thread
ticks every 10 ms besides (the method of the Linux tool cyclictest), so a stalled
interpreter or a starved CPU shows even while no action was due. A verdict about a
stack is only worth something when this error is small against the resolution of the
figure judged (`writes_resume_ms` counts in 100 ms buckets).

Only wake-up lateness counts: an action that starts late because the previous one took
long (a probe that waited its whole timeout on a frozen server) is the stack's time,
not the harness's.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEARTBEAT_INTERVAL_S = 0.01
HEARTBEAT = "heartbeat"
# Niceness of the instruments' threads (HA manager, probe, sampler, heartbeat) and of
# the workload process: the servers under test keep the default 0, so that on a busy
# runner the harness wakes on time and what slows down is the stack, which is measured.
INSTRUMENT_NICENESS = -10
WORKLOAD_NICENESS = -5


# Linux's autogroup scheduling shares the CPU fairly between sessions before niceness
# counts, and every PostgreSQL backend is a session of its own (it calls setsid()): a
# thread's niceness alone does not lift it above the servers, its session's does.
AUTOGROUP = Path("/proc/self/autogroup")
# The kernel lets a process without CAP_SYS_ADMIN change an autogroup's niceness once
# per 100 ms, machine-wide, and answers EAGAIN in between ("sched: autogroup" in
# kernel/sched/autogroup.c): parallel xdist workers starting proxies collide there.
AUTOGROUP_RETRY_S = 1.0


def _write_autogroup(path: Path, niceness: str) -> None:
    deadline = time.monotonic() + AUTOGROUP_RETRY_S
    while True:
        try:
            path.write_text(niceness)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def _harness_session_niceness() -> int:
    """The niceness the harness's session competes with. A process that no one
    started in a session of its own (a CI runner forked by an init that never calls
    setsid) stays in the root autogroup: its /proc file is empty, its niceness cannot
    be changed, and each of its threads competes on its own niceness, the
    instruments' at INSTRUMENT_NICENESS."""
    fields = AUTOGROUP.read_text().split()
    return int(fields[-1]) if fields else INSTRUMENT_NICENESS


def prioritise_session(niceness: int = INSTRUMENT_NICENESS) -> int | None:
    """Give this process's session (the harness: pytest, its xdist workers, the
    workload processes) the niceness against other sessions. Returns the niceness
    it replaced, for `restore_session`, or None where it could not (no autogroup
    scheduling, a process in the root autogroup, or no CAP_SYS_NICE)."""
    try:
        previous = int(AUTOGROUP.read_text().split()[-1])
        _write_autogroup(AUTOGROUP, str(niceness))
    except (OSError, ValueError, IndexError):
        return None
    return previous


def share_session_priority(pid: int) -> bool:
    """Give the session of process pid (a proxy) the workload's rank against the
    harness session: as many niceness steps below it as the workload's threads are
    below the instruments', never below the servers' default. A proxy left at the
    default loses the CPU to the very clients it serves, a balance no real deployment
    has (seen: Pgpool-II's main process, starved on a busy runner, reaped and forked
    children for over 10 s instead of failing over); a proxy at the harness's own
    rank took the CPU from the instruments in a reconnect storm (harness lag max
    90 ms -> 252 ms over the idle soak). Returns whether it took effect."""
    try:
        harness = _harness_session_niceness()
        niceness = min(0, harness + WORKLOAD_NICENESS - INSTRUMENT_NICENESS)
        _write_autogroup(Path(f"/proc/{pid}/autogroup"), str(niceness))
    except (OSError, ValueError, IndexError):
        return False
    return True


def restore_session(previous: int | None) -> None:
    if previous is not None:
        with contextlib.suppress(OSError):
            _write_autogroup(AUTOGROUP, str(previous))


def prioritise(niceness: int = INSTRUMENT_NICENESS) -> bool:
    """Give the calling thread (and threads and processes it starts later) a lower
    niceness. Needs root (CAP_SYS_NICE); without it nothing changes and the lag
    measurements say what that cost. Returns whether it took effect."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class LagSummary:
    """Lateness over a window: the largest, the 99th percentile (nearest rank), and
    the largest per source."""

    max_ms: float | None
    p99_ms: float | None
    samples: int
    by_source_max_ms: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "max_ms": self.max_ms,
            "p99_ms": self.p99_ms,
            "samples": self.samples,
            "by_source_max_ms": self.by_source_max_ms,
        }

    @classmethod
    def of(cls, samples: Iterable[tuple[str, int, int]]) -> LagSummary:
        """From (source, at monotonic ns, lateness ns) samples."""
        kept = list(samples)
        if not kept:
            return cls(None, None, 0)
        lags = sorted(lag for _, _, lag in kept)
        by_source: dict[str, float] = {}
        for source, _, lag in kept:
            by_source[source] = max(by_source.get(source, 0.0), _ms(lag))
        p99 = lags[max(0, math.ceil(0.99 * len(lags)) - 1)]
        return cls(_ms(lags[-1]), _ms(p99), len(kept), dict(sorted(by_source.items())))


def in_window(
    samples: Iterable[tuple[str, int, int]], since_ns: int | None, until_ns: int | None
) -> list[tuple[str, int, int]]:
    """The samples taken in [since_ns, until_ns] of the monotonic clock (open where None)."""
    return [
        s
        for s in samples
        if (since_ns is None or s[1] >= since_ns) and (until_ns is None or s[1] <= until_ns)
    ]


class LagMeter:
    """Thread-safe record of how late planned actions ran, on the monotonic clock."""

    def __init__(self) -> None:
        self._samples: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()

    def record(self, source: str, lateness_ns: int, at_ns: int | None = None) -> None:
        sample = (source, time.monotonic_ns() if at_ns is None else at_ns, max(0, lateness_ns))
        with self._lock:
            self._samples.append(sample)

    def late_by(self, source: str, planned_ns: int) -> None:
        """A one-shot action planned for planned_ns runs now: record how late it is."""
        now = time.monotonic_ns()
        self.record(source, now - planned_ns, now)

    def sleep_until(
        self,
        planned_ns: int,
        source: str,
        stop: threading.Event | None = None,
        *,
        overdue_counts: bool = False,
    ) -> bool:
        """Wait until planned_ns (monotonic) and record how late the wake-up was.
        Returns True when `stop` was set meanwhile (nothing is recorded then).

        A plan already overdue on arrival is recorded only with overdue_counts: right
        for a one-shot action timed from another thread's event (this thread itself
        may have started late), wrong for a loop whose previous turn overran."""
        remaining_ns = planned_ns - time.monotonic_ns()
        if remaining_ns <= 0:
            if overdue_counts:
                self.late_by(source, planned_ns)
            return stop is not None and stop.is_set()
        if stop is not None:
            if stop.wait(remaining_ns / 1e9):
                return True
        else:
            time.sleep(remaining_ns / 1e9)
        self.late_by(source, planned_ns)
        return False

    def samples(
        self, since_ns: int | None = None, until_ns: int | None = None
    ) -> list[tuple[str, int, int]]:
        with self._lock:
            kept = list(self._samples)
        return in_window(kept, since_ns, until_ns)

    def summary(self, since_ns: int | None = None, until_ns: int | None = None) -> LagSummary:
        return LagSummary.of(self.samples(since_ns, until_ns))


class Heartbeat:
    """Ticks every interval in a thread of its own and records each tick's lateness:
    the scheduling error any other thread of this process would have seen."""

    def __init__(self, meter: LagMeter, interval_s: float = HEARTBEAT_INTERVAL_S) -> None:
        self.meter = meter
        self.interval_ns = int(interval_s * 1e9)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pgha-heartbeat", daemon=True)

    def _run(self) -> None:
        prioritise()
        planned = time.monotonic_ns()
        while True:
            planned += self.interval_ns
            if self.meter.sleep_until(planned, HEARTBEAT, self._stop):
                return
            # After a long stall, plan from now: one late tick is one sample, not many.
            planned = max(planned, time.monotonic_ns() - self.interval_ns)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _ms(ns: float) -> float:
    return round(ns / 1e6, 1)
