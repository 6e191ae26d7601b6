"""What an HA manager does for the harness. `scripted` is the one built in; Patroni
and pg_auto_failover adapters implement the same protocol."""

from __future__ import annotations

from typing import Protocol

from pytest_pgha.cluster.node import Node
from pytest_pgha.timeline import Event


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
