"""What an HA manager does for the harness, and what a trial tells it. `scripted` is
the one built in; others (Patroni, pg_auto_failover, a plugin's) register a factory in
pytest_pgha.ha.registry and implement the same protocol."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.node import Node
from pytest_pgha.errors import PghaConfigError
from pytest_pgha.proxies.base import Proxy
from pytest_pgha.timeline import Event, Timeline

RewirePath = Literal["explicit", "monitor"]
REWIRE_PATHS: tuple[RewirePath, ...] = ("explicit", "monitor")


@dataclass(frozen=True)
class DetectPolicy:
    """How the HA manager notices the primary is gone: after a fixed delay (the lab's
    `sleep 1`), or by probing every interval until `failures` probes in a row fail."""

    delay_s: float | None = 1.0
    probe_interval_s: float | None = None
    failures: int = 1

    def __post_init__(self) -> None:
        if (self.delay_s is None) == (self.probe_interval_s is None):
            raise PghaConfigError.invalid(
                "detect", self, "give exactly one of delay_s or probe_interval_s"
            )
        if self.delay_s is not None and not 0 <= self.delay_s <= 60:
            raise PghaConfigError.invalid("detect_delay_s", self.delay_s, "use 0..60 seconds")
        if self.probe_interval_s is not None and not 0.01 <= self.probe_interval_s <= 10:
            raise PghaConfigError.invalid(
                "probe_interval_s", self.probe_interval_s, "use 0.01..10 seconds"
            )

    def describe(self) -> str:
        if self.probe_interval_s is not None:
            return f"probe every {self.probe_interval_s}s"
        return f"{self.delay_s}s"


@dataclass(frozen=True)
class HAOptions:
    """What a trial asks of its HA manager. A manager that detects by itself (Patroni)
    ignores `detect`; `settings` carries a manager's own options."""

    detect: DetectPolicy = field(default_factory=DetectPolicy)
    rewire: RewirePath = "explicit"
    settings: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.rewire not in REWIRE_PATHS:
            raise PghaConfigError.invalid(
                "rewire", self.rewire, f"use one of {', '.join(REWIRE_PATHS)}"
            )


class HAManager(Protocol):
    kind: str

    def prepare(self) -> None:
        """Get ready before the fault (connections, agents), outside the measured window."""

    def start_failover(self, inject: Event, *, planned: bool = False) -> None:
        """React to a lost primary in the background, recording each phase."""

    def wait(self, timeout: float) -> Node:
        """Block until the failover finished; return the new primary."""

    def close(self) -> None:
        """Stop background work (idempotent)."""


# Builds the manager of one trial for the stack under test.
HAFactory = Callable[[Cluster, "Proxy | None", Timeline, HAOptions], HAManager]
