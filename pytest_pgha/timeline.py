"""Timestamped events shared by faults, the HA manager and the proxies.

Every event carries both clocks: the monotonic one orders events inside one process
without jumps; the wall clock lines them up with the transaction log (pgbench's -l
format stores epoch seconds and microseconds).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_pgha.lag import LagMeter

# The names of the events a trial's timeline holds, in order: the fault's inject,
# then the HA manager's phases. Metrics attribute the write stall to them.
INJECT = "inject"
DETECT = "detect"
FENCE = "fence"
DECIDE = "decide"
PROMOTE_START = "promote_start"
PROMOTE_DONE = "promote_done"
REWIRE_START = "rewire_start"
REWIRE_DONE = "rewire_done"
FOLLOW_DONE = "follow_done"


def now_epoch_us() -> int:
    return time.time_ns() // 1000


@dataclass(frozen=True)
class Event:
    """One thing that happened: a fault injected, an HA phase started or ended."""

    name: str
    epoch_us: int
    monotonic_ns: int
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def first_at_or_after(events: Iterable[Event], name: str, since_us: int) -> int | None:
    """epoch_us of the first event `name` at or after since_us. Only events after an
    inject belong to its failover: a timeline may also hold an earlier planned
    switchover with the same event names."""
    return min(
        (e.epoch_us for e in events if e.name == name and e.epoch_us >= since_us), default=None
    )


class Timeline:
    """Thread-safe, append-only list of events of one test, and how late the harness
    ran the actions it planned (`lag`)."""

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self.lag = LagMeter()

    def record(self, name: str, **detail: Any) -> Event:
        event = Event(name, now_epoch_us(), time.monotonic_ns(), dict(detail))
        with self._lock:
            self._events.append(event)
        return event

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def first(self, name: str) -> Event | None:
        return next((e for e in self.events if e.name == name), None)

    def to_json(self) -> list[dict[str, Any]]:
        return [e.to_json() for e in self.events]
