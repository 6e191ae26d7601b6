"""Stale reads: a read that returns a value older than one already acknowledged to a
writer before the read began.

A writer commits increasing values and notes, per value, when the commit was
acknowledged and the WAL position after it; a reader notes what it saw and where the
serving node's replay stood. A stale read's staleness is how long before the read the
oldest write it missed had been acknowledged (ms), and how far the node's replay
trailed that write's commit (bytes). Reported as a rate and as distributions
(p50 / p99 / max, nearest rank), per read endpoint.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_pgha.metrics.catalog import register_metric
from pytest_pgha.workload.stale_reads import Read, Write

register_metric(
    "stale_read_pct",
    unit="percent",
    meaning="reads that returned a value older than one acknowledged before the read began",
    precision="exact",
    group="reads",
)
register_metric(
    "staleness_ms_p99",
    unit="ms",
    meaning="99th percentile over stale reads of how long the oldest missed write had been "
    "acknowledged when the read began",
    precision="the clocks' (one machine's wall clock)",
    group="reads",
    timed=True,
)
register_metric(
    "staleness_bytes_p99",
    unit="bytes",
    meaning="99th percentile over stale reads of how far the serving node's replay trailed "
    "the oldest missed commit",
    precision="exact",
    group="reads",
)


@dataclass(frozen=True)
class Percentiles:
    p50: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, values: Iterable[float]) -> Percentiles:
        ordered = sorted(values)
        if not ordered:
            return cls(None, None, None)

        def rank(q: float) -> float:
            return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

        return cls(rank(0.50), rank(0.99), ordered[-1])


@dataclass(frozen=True)
class EndpointStaleness:
    endpoint: str
    reads: int
    stale: int
    staleness_ms: Percentiles
    staleness_bytes: Percentiles

    @property
    def stale_read_pct(self) -> float:
        return 100.0 * self.stale / self.reads if self.reads else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "reads": self.reads,
            "stale": self.stale,
            "stale_read_pct": round(self.stale_read_pct, 3),
            "staleness_ms": vars(self.staleness_ms),
            "staleness_bytes": vars(self.staleness_bytes),
        }


@dataclass
class _Misses:
    ms: list[float] = field(default_factory=list)
    bytes: list[float] = field(default_factory=list)
    reads: int = 0


def staleness(writes: Sequence[Write], reads: Iterable[Read]) -> dict[str, EndpointStaleness]:
    """Per endpoint. writes must be in the order their values increase (the writer's
    own order); a read is judged against the writes acknowledged before it began."""
    acked = [w.acked_us for w in writes]
    values = [w.value for w in writes]
    if any(b.value <= a.value for a, b in itertools.pairwise(writes)):
        raise ValueError("writes must carry strictly increasing values, in order")
    per: dict[str, _Misses] = {}
    for read in reads:
        misses = per.setdefault(read.endpoint, _Misses())
        misses.reads += 1
        known = bisect.bisect_left(acked, read.started_us)  # acknowledged before the read
        if known == 0 or writes[known - 1].value <= read.value:
            continue
        missed = writes[bisect.bisect_right(values, read.value, 0, known)]
        misses.ms.append((read.started_us - missed.acked_us) / 1000.0)
        if read.replay_lsn is not None:
            misses.bytes.append(float(max(0, missed.commit_lsn - read.replay_lsn)))
    return {
        endpoint: EndpointStaleness(
            endpoint,
            m.reads,
            len(m.ms),
            Percentiles.of(m.ms),
            Percentiles.of(m.bytes),
        )
        for endpoint, m in per.items()
    }
