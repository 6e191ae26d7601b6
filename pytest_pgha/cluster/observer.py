"""Reading a cluster's state, apart from launching it: who is primary, on which
timeline, which standbys stream and count as synchronous, how far each has come. It
needs nodes to ask, not to own: a cluster launched here, or one that Patroni, another
HA manager or an operator started."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg

from pytest_pgha.cluster.lsn import lsn_to_int
from pytest_pgha.cluster.spec import SyncMode
from pytest_pgha.errors import ClusterError, PghaConfigError
from pytest_pgha.poll import wait_until


class ObservedNode(Protocol):
    """What the observer asks of a node (pytest_pgha.cluster.node.Node has it)."""

    name: str

    def running(self) -> bool: ...

    def is_in_recovery(self) -> bool: ...

    def timeline(self) -> int: ...

    def sql(self, query: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]: ...

    def value(self, query: str, params: Sequence[Any] | None = None) -> Any: ...


@dataclass(frozen=True)
class StandbyState:
    """One row of the primary's pg_stat_replication."""

    name: str
    state: str
    sync_state: str
    sent: int | None
    write: int | None
    flush: int | None
    replay: int | None
    replay_lag_bytes: int | None
    replay_lag_s: float | None = None  # pg_stat_replication.replay_lag; None when idle


@dataclass(frozen=True)
class Topology:
    primary: str | None
    timeline: int | None
    standbys: dict[str, StandbyState] = field(default_factory=dict)
    in_recovery: dict[str, bool | None] = field(default_factory=dict)
    synchronous_standby_names: str = ""

    def streaming(self) -> list[str]:
        return sorted(n for n, s in self.standbys.items() if s.state == "streaming")

    def synchronous(self) -> list[str]:
        return sorted(n for n, s in self.standbys.items() if s.sync_state in ("sync", "quorum"))


class ClusterObserver:
    """Observes `nodes()`; `primary()` names the node to read replication from (by
    default the one that answers pg_is_in_recovery() = false)."""

    def __init__(
        self,
        nodes: Callable[[], Sequence[ObservedNode]],
        primary: Callable[[], ObservedNode] | None = None,
    ) -> None:
        self._nodes = nodes
        self._primary = primary or self._find_primary

    def _find_primary(self) -> ObservedNode:
        for node in self._nodes():
            try:
                if node.running() and not node.is_in_recovery():
                    return node
            except psycopg.Error:
                continue
        raise ClusterError(f"no primary among {[n.name for n in self._nodes()]}")

    def topology(self) -> Topology:
        in_recovery: dict[str, bool | None] = {}
        by_name = {node.name: node for node in self._nodes()}
        for node in by_name.values():
            try:
                in_recovery[node.name] = node.is_in_recovery() if node.running() else None
            except Exception:  # a frozen or dying node: unknown, not an error
                in_recovery[node.name] = None
        primaries = [name for name, rec in in_recovery.items() if rec is False]
        if not primaries:
            return Topology(None, None, {}, in_recovery)
        primary = by_name[primaries[0]]
        try:
            return Topology(
                primary.name,
                primary.timeline(),
                self.standby_states(primary),
                in_recovery,
                str(primary.value("SHOW synchronous_standby_names")),
            )
        except psycopg.Error:  # it died between the two looks: say what we know
            return Topology(primary.name, None, {}, in_recovery)

    @staticmethod
    def standby_states(primary: ObservedNode) -> dict[str, StandbyState]:
        rows = primary.sql(
            "SELECT application_name, state, sync_state, sent_lsn, write_lsn, flush_lsn,"
            " replay_lsn, pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint,"
            " extract(epoch FROM replay_lag)::float8"
            " FROM pg_stat_replication"
        )
        return {
            r[0]: StandbyState(
                r[0],
                r[1],
                r[2],
                sent=lsn_to_int(r[3]),
                write=lsn_to_int(r[4]),
                flush=lsn_to_int(r[5]),
                replay=lsn_to_int(r[6]),
                replay_lag_bytes=None if r[7] is None else int(r[7]),
                replay_lag_s=r[8],
            )
            for r in rows
        }

    def wait_streaming(self, standbys: Iterable[ObservedNode], timeout: float = 30) -> None:
        names = {node.name for node in standbys}

        def all_streaming() -> bool:
            rows = self._primary().sql(
                "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'"
            )
            return names <= {r[0] for r in rows}

        wait_until(all_streaming, timeout=timeout, what=f"{sorted(names)} to stream")

    def wait_for_lsn(
        self,
        lsn: int,
        standbys: Sequence[ObservedNode] | None = None,
        *,
        kind: str = "replay",
        timeout: float = 30,
    ) -> None:
        """Wait until the standbys have written/flushed/replayed lsn (as the primary's
        pg_stat_replication reports it, which is what synchronous commit waits on)."""
        if kind not in ("write", "flush", "replay"):
            raise PghaConfigError.invalid("kind", kind, "use write, flush or replay")
        primary = self._primary()
        chosen = standbys if standbys is not None else self._standbys_of(primary)
        names = {n.name for n in chosen}

        def reached() -> bool:
            states = self.standby_states(self._primary())
            return all(
                getattr(states.get(name), kind, None) is not None
                and getattr(states[name], kind) >= lsn
                for name in names
            )

        wait_until(reached, timeout=timeout, what=f"{sorted(names)} to {kind} {lsn:X}")

    def wait_for_replay(
        self,
        lsn: int | None = None,
        standbys: Sequence[ObservedNode] | None = None,
        timeout: float = 30,
    ) -> None:
        if lsn is None:
            current = self._primary().value("SELECT pg_current_wal_insert_lsn()")
            lsn = int(lsn_to_int(current) or 0)
        self.wait_for_lsn(lsn, standbys, kind="replay", timeout=timeout)

    def wait_synchronous(self, mode: SyncMode, timeout: float = 30) -> None:
        def counted() -> bool:
            states = self.standby_states(self._primary())
            confirmed = [
                n
                for n in mode.standbys
                if n in states and states[n].sync_state in ("sync", "quorum")
            ]
            return len(confirmed) >= mode.count

        wait_until(
            counted, timeout=timeout, what=f"standbys to count as synchronous for {mode.to_guc()!r}"
        )

    def wait_for_count(
        self, lsn: int, standbys: Sequence[ObservedNode], count: int, kind: str, timeout: float
    ) -> None:
        def enough() -> bool:
            states = self.standby_states(self._primary())
            done = [n for n in standbys if (getattr(states.get(n.name), kind, None) or 0) >= lsn]
            return len(done) >= count

        wait_until(enough, timeout=timeout, what=f"{count} standby(s) to {kind} LSN {lsn:X}")

    def _standbys_of(self, primary: ObservedNode) -> list[ObservedNode]:
        return [n for n in self._nodes() if n is not primary]
