"""A sandboxed cluster: one primary and N streaming replicas cloned from the template."""

from __future__ import annotations

import difflib
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from pytest_pgha.cluster import conf
from pytest_pgha.cluster.lsn import lsn_to_int
from pytest_pgha.cluster.node import Node, wait_until
from pytest_pgha.cluster.spec import SYNCHRONOUS_COMMIT_LEVELS, ClusterSpec, SyncMode, node_name
from pytest_pgha.cluster.template import Template
from pytest_pgha.errors import ClusterError, PghaConfigError
from pytest_pgha.sandbox.context import SandboxContext


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


class Cluster:
    def __init__(
        self, spec: ClusterSpec, template: Template, context: SandboxContext, workdir: Path
    ) -> None:
        self.spec = spec
        self.template = template
        self.credentials = template.credentials
        self.binaries = template.binaries
        self.context = context
        self.workdir = workdir
        _check_setting_names(spec.settings, template.setting_names, self.binaries.version)
        self.nodes: list[Node] = []
        self.primary: Node
        self._ports: list[int] = []

    # -- life cycle -------------------------------------------------------------------
    def start(self) -> None:
        settings = {k: conf.conf_value(v) for k, v in self.spec.settings.items()}
        settings["synchronous_commit"] = self.spec.synchronous_commit
        for index in range(self.spec.replicas + 1):
            port = self.context.ports.reserve(node_name(index))
            self._ports.append(port)
            self.nodes.append(
                Node(
                    node_name(index),
                    self.workdir / node_name(index),
                    port,
                    binaries=self.binaries,
                    credentials=self.credentials,
                    context=self.context,
                    settings=settings,
                )
            )
        self.primary = self.nodes[0]
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            copies = [pool.submit(self._clone, node) for node in self.nodes]
            copies[0].result()
            self._start_primary()
            for copy in copies[1:]:
                copy.result()
        for replica in self.replicas:
            replica.configure_as_replica(self.primary)
            replica.launch()
        for replica in self.replicas:
            replica.wait_ready()
        self.wait_streaming(self.replicas, timeout=30)
        if self.spec.sync_mode().enabled:
            self.wait_synchronous(self.spec.sync_mode(), timeout=30)

    def _clone(self, node: Node) -> None:
        # cp -a keeps ownership and modes, and is faster than shutil for many files.
        argv = ["cp", "-a", str(self.template.datadir), str(node.datadir)]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ClusterError(f"cloning the template for {node.name} failed: {result.stderr}")
        node.clear_slots()

    def _start_primary(self) -> None:
        sync = self.spec.sync_mode()
        self.primary.write_conf(
            {"synchronous_standby_names": conf.quote(sync.to_guc())} if sync.enabled else None
        )
        self.primary.launch()
        self.primary.wait_ready()
        self.primary.sql(  # one statement: each session costs a SCRAM exchange
            "SELECT pg_create_physical_replication_slot(name, true)"
            " FROM unnest(%s::text[]) AS name",
            [[replica.name for replica in self.nodes[1:]]],
        )

    def stop(self) -> None:
        """Stop every node, whatever state a fault left it in; release the ports.
        One node failing to stop must not leave the others running."""
        try:
            with ThreadPoolExecutor(max_workers=max(1, len(self.nodes))) as pool:
                outcomes = [pool.submit(node.destroy) for node in self.nodes]
            errors = [f.exception() for f in outcomes if f.exception() is not None]
        finally:
            for port in self._ports:
                self.context.ports.release(port)
            self._ports.clear()
        if errors:
            raise ClusterError(f"stopping the cluster failed: {errors}")

    def remove(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- roles ---------------------------------------------------------------------
    @property
    def replicas(self) -> list[Node]:
        return [node for node in self.nodes if node is not self.primary]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r}; nodes are {[n.name for n in self.nodes]}")

    def promote(self, node: Node, *, kept: bool = False) -> None:
        """Promote node (through its kept session with kept=True) and make it the
        cluster's primary."""
        node.promote(kept=kept)
        self.primary = node

    def rejoin(self, node: Node, *, rewind: bool = True, timeout: float = 60.0) -> str:
        """Make node a streaming standby of the current primary (pg_rewind first when
        rewind is true); returns pg_rewind's output once the node streams."""
        output = node.rejoin(self.primary, rewind=rewind, timeout=timeout)
        self.wait_streaming([node], timeout=timeout)
        return output

    def heal(self, timeout: float = 60.0) -> list[str]:
        """Back to full strength after a failover: every standby that is not running
        (a fenced or stopped old primary) rejoins the current primary, pg_rewind first.
        Returns the names of the nodes that rejoined."""
        down = [node for node in self.replicas if not node.running()]
        for node in down:
            node.rejoin(self.primary, timeout=timeout)
        self.wait_streaming(self.replicas, timeout=timeout)
        return [node.name for node in down]

    def multi_host_dsn(
        self,
        user: str = "app",
        dbname: str = "app",
        target_session_attrs: str = "read-write",
        **params: object,
    ) -> str:
        """A libpq multi-host conninfo over every node: the no-proxy baseline."""
        hosts = ",".join("127.0.0.1" for _ in self.nodes)
        ports = ",".join(str(node.port) for node in self.nodes)
        parts = {
            "host": hosts,
            "port": ports,
            "user": user,
            "dbname": dbname,
            "password": self.credentials.password(user),
            "connect_timeout": 3,
            "target_session_attrs": target_session_attrs,
            **params,
        }
        return " ".join(f"{k}={v}" for k, v in parts.items())

    # -- observation -------------------------------------------------------------------
    def topology(self) -> Topology:
        in_recovery: dict[str, bool | None] = {}
        for node in self.nodes:
            try:
                in_recovery[node.name] = node.is_in_recovery() if node.running() else None
            except Exception:  # a frozen or dying node: unknown, not an error
                in_recovery[node.name] = None
        primaries = [name for name, rec in in_recovery.items() if rec is False]
        if not primaries:
            return Topology(None, None, {}, in_recovery)
        primary = self.node(primaries[0])
        try:
            return Topology(
                primary.name,
                primary.timeline(),
                self._standby_states(primary),
                in_recovery,
                str(primary.value("SHOW synchronous_standby_names")),
            )
        except psycopg.Error:  # it died between the two looks: say what we know
            return Topology(primary.name, None, {}, in_recovery)

    @staticmethod
    def _standby_states(primary: Node) -> dict[str, StandbyState]:
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

    def wait_streaming(self, standbys: Iterable[Node], timeout: float = 30) -> None:
        names = {node.name for node in standbys}

        def all_streaming() -> bool:
            rows = self.primary.sql(
                "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'"
            )
            return names <= {r[0] for r in rows}

        wait_until(all_streaming, timeout=timeout, what=f"{sorted(names)} to stream")

    def wait_for_lsn(
        self,
        lsn: int,
        standbys: Sequence[Node] | None = None,
        *,
        kind: str = "replay",
        timeout: float = 30,
    ) -> None:
        """Wait until the standbys have written/flushed/replayed lsn (as the primary's
        pg_stat_replication reports it, which is what synchronous commit waits on)."""
        if kind not in ("write", "flush", "replay"):
            raise PghaConfigError.invalid("kind", kind, "use write, flush or replay")
        names = {n.name for n in (standbys if standbys is not None else self.replicas)}

        def reached() -> bool:
            states = self._standby_states(self.primary)
            return all(
                getattr(states.get(name), kind, None) is not None
                and getattr(states[name], kind) >= lsn
                for name in names
            )

        wait_until(reached, timeout=timeout, what=f"{sorted(names)} to {kind} {lsn:X}")

    def wait_for_replay(
        self, lsn: int | None = None, standbys: Sequence[Node] | None = None, timeout: float = 30
    ) -> None:
        if lsn is None:
            lsn = int(lsn_to_int(self.primary.value("SELECT pg_current_wal_insert_lsn()")) or 0)
        self.wait_for_lsn(lsn, standbys, kind="replay", timeout=timeout)

    def wait_synchronous(self, mode: SyncMode, timeout: float = 30) -> None:
        def counted() -> bool:
            states = self._standby_states(self.primary)
            confirmed = [
                n
                for n in mode.standbys
                if n in states and states[n].sync_state in ("sync", "quorum")
            ]
            return len(confirmed) >= mode.count

        wait_until(
            counted, timeout=timeout, what=f"standbys to count as synchronous for {mode.to_guc()!r}"
        )

    def set_synchronous(
        self, synchronous: str, *, synchronous_commit: str | None = None, timeout: float = 30
    ) -> Topology:
        """The safe sequence from the synchronous-replication talk: change
        synchronous_standby_names, reload, wait until the server really uses the new
        value, take pg_current_wal_insert_lsn() and wait until the standbys flushed it
        (applied it for remote_apply). Only then do they count as synchronous."""
        replica_names = tuple(n.name for n in self.replicas)
        mode = SyncMode.parse(synchronous, replica_names)
        if synchronous_commit is not None and synchronous_commit not in SYNCHRONOUS_COMMIT_LEVELS:
            raise PghaConfigError.invalid(
                "synchronous_commit",
                synchronous_commit,
                f"use one of {', '.join(SYNCHRONOUS_COMMIT_LEVELS)}",
            )
        primary = self.primary
        primary.sql(f"ALTER SYSTEM SET synchronous_standby_names = {conf.quote(mode.to_guc())}")
        if synchronous_commit is not None:
            primary.sql(f"ALTER SYSTEM SET synchronous_commit = {conf.quote(synchronous_commit)}")
        primary.sql("SELECT pg_reload_conf()")
        # Reload is asynchronous: new sessions see the value once the postmaster read it.
        wait_until(
            lambda: (
                _normalised(primary.value("SHOW synchronous_standby_names"))
                == _normalised(mode.to_guc())
            ),
            timeout=timeout,
            what="synchronous_standby_names to take effect",
        )
        if not mode.enabled:
            return self.topology()
        lsn = lsn_to_int(primary.value("SELECT pg_current_wal_insert_lsn()")) or 0
        level = synchronous_commit or str(primary.value("SHOW synchronous_commit"))
        kind = {"remote_apply": "replay", "remote_write": "write"}.get(level, "flush")
        listed = [self.node(n) for n in mode.standbys]
        self._wait_for_count(lsn, listed, mode.count, kind, timeout)
        self.wait_synchronous(mode, timeout)
        return self.topology()

    def _wait_for_count(
        self, lsn: int, standbys: Sequence[Node], count: int, kind: str, timeout: float
    ) -> None:
        def enough() -> bool:
            states = self._standby_states(self.primary)
            done = [n for n in standbys if (getattr(states.get(n.name), kind, None) or 0) >= lsn]
            return len(done) >= count

        wait_until(enough, timeout=timeout, what=f"{count} standby(s) to {kind} LSN {lsn:X}")

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _check_setting_names(
    settings: Mapping[str, object], known: frozenset[str], version: str
) -> None:
    """Fail before anything starts on a misspelt setting; PostgreSQL itself would only
    say so in a server log. Names with a dot are extension placeholders: any is valid."""
    known_lower = {name.lower() for name in known}
    unknown = sorted(n for n in settings if "." not in n and n.lower() not in known_lower)
    if not unknown:
        return
    hints = [
        f"{name} -> {close[0]}"
        for name in unknown
        if (close := difflib.get_close_matches(name.lower(), known_lower, n=1))
    ]
    did_you_mean = f" (did you mean {', '.join(hints)}?)" if hints else ""
    raise PghaConfigError.invalid(
        "settings",
        unknown,
        f"PostgreSQL {version} has no such setting{did_you_mean}; "
        "fix the spelling (SELECT name FROM pg_settings lists them)",
    )


def _normalised(value: Any) -> str:
    return " ".join(str(value or "").replace('"', "").split()).lower()
