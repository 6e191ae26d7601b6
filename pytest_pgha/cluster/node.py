"""One PostgreSQL server: a real postmaster, launched in a sandbox, acted on through its
host's transport (pytest_pgha.cluster.transport)."""

from __future__ import annotations

import contextlib
import shutil
import signal
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg.conninfo import make_conninfo

from pytest_pgha.cluster import conf, timelines
from pytest_pgha.cluster.binaries import PgBinaries
from pytest_pgha.cluster.lsn import lsn_to_int
from pytest_pgha.cluster.template import (
    Credentials,
    base_env,
    wait_ready,
)
from pytest_pgha.cluster.transport import LocalTransport, NodeTransport
from pytest_pgha.errors import ClusterError, PghaConfigError
from pytest_pgha.sandbox.context import SandboxContext
from pytest_pgha.sandbox.process import ManagedProcess
from pytest_pgha.sandbox.pstree import kill_inside
from pytest_pgha.sandbox.sysv import release_segment

# The role dsn(), connect() and sql() use unless told otherwise: the harness inspects
# and drives nodes as the superuser; the application's role is "app".
SUPERUSER = "postgres"
DEFAULT_USER = SUPERUSER
STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}
# Names a test can pass to Node.signal(): what a fault injector thinks in.
SIGNAL_NAMES = {
    "kill": signal.SIGKILL,
    "stop": signal.SIGSTOP,
    "cont": signal.SIGCONT,
    "term": signal.SIGTERM,
    "int": signal.SIGINT,
    "quit": signal.SIGQUIT,
    "hup": signal.SIGHUP,
}


class ReplicationPath(Protocol):
    """Something on a standby's replication connection that faults can act on."""

    def route(self, upstream: Node) -> tuple[str, int]:
        """Forward to upstream from now on; return where the standby connects."""

    def cut(self) -> None:
        """Drop every byte either way, connections left open (a partition)."""

    def mend(self) -> None:
        """Undo cut()."""


@dataclass(frozen=True)
class WalPositions:
    """Where a node is in the WAL, as integers (None where the role has no such thing)."""

    in_recovery: bool
    current: int | None  # primary: pg_current_wal_lsn()
    insert: int | None  # primary: pg_current_wal_insert_lsn()
    received: int | None  # standby: pg_last_wal_receive_lsn()
    replayed: int | None  # standby: pg_last_wal_replay_lsn()

    @property
    def most_advanced(self) -> int:
        return max(v for v in (self.current, self.received, self.replayed, 0) if v is not None)


class Node:
    def __init__(
        self,
        name: str,
        datadir: Path,
        port: int,
        *,
        binaries: PgBinaries,
        credentials: Credentials,
        context: SandboxContext,
        settings: Mapping[str, str],
        transport: NodeTransport | None = None,
    ) -> None:
        self.name = name
        self.datadir = datadir
        self.port = port
        self.transport = transport or LocalTransport(context)
        # Where clients reach the node.
        self.host = self.transport.address
        self.binaries = binaries
        self.credentials = credentials
        self._context = context
        self._settings = dict(settings)
        self.log_path = datadir.parent / f"{name}.log"
        self._process: ManagedProcess | None = None
        # SIGKILL sent to the postmaster: it is down, even while the kernel has not
        # reaped it yet (a poll right after the signal can still find it alive).
        self._killed = False
        self.upstream: Node | None = None
        # What lies between this node, as a standby, and its upstream: None for a
        # direct connection, or a fault proxy (pytest_pgha.faults.toxiproxy).
        self.replication_path: ReplicationPath | None = None
        self._kept: psycopg.Connection[Any] | None = None
        self._kept_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<Node {self.name} port={self.port}>"

    # -- connecting -----------------------------------------------------------------
    def dsn(self, user: str = DEFAULT_USER, dbname: str = "app", **params: object) -> str:
        """A libpq conninfo for the node (make_conninfo quotes every value)."""
        parts: dict[str, object] = {
            "host": self.host,
            "port": self.port,
            "user": user,
            "dbname": dbname,
            "password": self.credentials.password(user),
            "connect_timeout": 3,
            **params,
        }
        return make_conninfo(**{k: str(v) for k, v in parts.items()})

    def connect(
        self,
        user: str = DEFAULT_USER,
        dbname: str = "app",
        *,
        autocommit: bool = True,
        **params: Any,
    ) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn(user, dbname), autocommit=autocommit, **params)

    def sql(
        self,
        query: str,
        params: Sequence[Any] | None = None,
        *,
        user: str = DEFAULT_USER,
        dbname: str = "app",
        kept: bool = False,
    ) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows: in a short-lived session, or with
        kept=True in the node's kept-open superuser session, as an HA agent watching
        the node holds one (a new SCRAM login costs milliseconds on a busy machine,
        inside the failover window the harness measures)."""
        if kept:
            return self._kept_sql(query, params)
        with self.connect(user, dbname) as conn:
            # bytes: psycopg's signature wants a LiteralString, a run-time query is not.
            cursor = conn.execute(query.encode(), params)
            return cursor.fetchall() if cursor.description else []

    def value(self, query: str, params: Sequence[Any] | None = None, *, kept: bool = False) -> Any:
        rows = self.sql(query, params, kept=kept)
        return rows[0][0] if rows else None

    def open_kept_session(self) -> None:
        """Open the kept session now (before a fault), so that using it costs no login."""
        with self._kept_lock:
            if self._kept is None or self._kept.closed or self._kept.broken:
                self._kept = self.connect(SUPERUSER)

    def _kept_sql(self, query: str, params: Sequence[Any] | None) -> list[tuple[Any, ...]]:
        """On the kept session; once more on a fresh one if it had gone stale (the node
        restarted since it was opened: psycopg only learns that when it next uses it)."""
        for attempt in (1, 2):
            self.open_kept_session()
            with self._kept_lock:
                assert self._kept is not None
                try:
                    cursor = self._kept.execute(query.encode(), params)
                    return cursor.fetchall() if cursor.description else []
                except psycopg.OperationalError:
                    self._kept.close()
                    self._kept = None
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def close_kept_session(self) -> None:
        """Close it (a node that stops, crashes or rejoins: the session would be stale)."""
        with self._kept_lock:
            if self._kept is not None:
                with contextlib.suppress(psycopg.Error):
                    self._kept.close()
                self._kept = None

    # -- process control --------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The postmaster's pid, or None when it is not running."""
        return self._process.pid if self._process and self._process.running() else None

    def running(self) -> bool:
        return self._process is not None and not self._killed and self._process.running()

    def write_conf(self, extra: Mapping[str, str] | None = None) -> None:
        settings = {
            "port": str(self.port),
            "cluster_name": conf.quote(self.name),
            **self._settings,
            **(extra or {}),
        }
        conf.write_node_conf(self.datadir, settings)
        self._context.identity.own(self.datadir / conf.NODE_CONF)

    def launch(self) -> None:
        """Start the postmaster without waiting for it to accept connections."""
        if self.running():
            raise ClusterError(f"{self.name} is already running (pid {self.pid})")
        if self._process is not None:
            # A crashed postmaster leaves backends behind for a moment; they would keep
            # the old shared memory busy and the new postmaster would refuse to start.
            if self._killed:
                self._process.wait(10.0)
            kill_inside(self.datadir)
            self._process.forget()
        self._killed = False
        self._process = ManagedProcess(
            [self.binaries.program("postgres"), "-D", str(self.datadir)],
            label=self.name,
            log_path=self.log_path,
            identity=self._context.identity,
            registry=self._context.registry,
            env=base_env(),
            cwd=self.datadir,
        )
        self._process.start()

    def wait_ready(self, timeout: float = 60.0) -> None:
        if self._process is None:
            raise ClusterError(f"{self.name} was never started")
        wait_ready(self.datadir, self._process, timeout=timeout)

    def start(self, timeout: float = 60.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def stop(self, mode: str = "fast", timeout: float = 60.0) -> None:
        """Shut down (smart, fast or immediate); SIGKILL every process of the node
        if it has not stopped after timeout."""
        if mode not in STOP_SIGNALS:
            raise PghaConfigError.invalid("mode", mode, f"use one of {', '.join(STOP_SIGNALS)}")
        if self._process is None:
            return
        self.close_kept_session()  # it would keep a smart shutdown waiting
        # A frozen postmaster would only see the shutdown signal after the timeout.
        if self.running():
            self.transport.signal_tree(self._process.pid, signal.SIGCONT)
        self._process.stop(STOP_SIGNALS[mode], timeout=timeout)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def signal(self, signum: int | str, *, whole_group: bool = False) -> None:
        """Send a signal (a number or kill/stop/cont/term/int/quit/hup) to the postmaster,
        or with whole_group to every process of the node (postmaster first), as a
        frozen or lost host would see it."""
        number = _signal_number(signum)
        if self._process is None or self.pid is None:
            raise ClusterError(f"{self.name} is not running; cannot send it {signum!r}")
        if whole_group:
            self.transport.signal_tree(self.pid, number)
        else:
            self.transport.kill([self.pid], number)

    def _thaw_all(self) -> None:
        """SIGCONT whatever of the node is left, orphaned backends of a dead postmaster
        included: stopped processes would ignore the shutdown."""
        if self._process is not None:
            self.transport.signal_tree(self._process.pid, signal.SIGCONT)
            self.transport.signal_inside(self.datadir, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the postmaster alone (its backends exit when they next notice)."""
        self.signal(signal.SIGKILL)
        assert self._process is not None
        self._process.wait(5.0)

    def processes(self) -> list[int]:
        """The postmaster and every process under it, postmaster first. Listing them
        reads /proc, which takes tens of milliseconds on a busy machine: a fault lists
        them before its timed moment and passes them to crash()."""
        if self._process is None or not self._process.running():
            raise ClusterError(f"{self.name} is not running")
        return self.transport.processes(self._process.pid)

    def crash(self, victims: list[int] | None = None) -> int:
        """SIGKILL the postmaster and every process under it at once, without waiting:
        the node lost power. `victims` as processes() listed them (a child forked since
        exits when it next notices its postmaster gone). Returns how many there were."""
        doomed = self.processes() if victims is None else victims
        self.transport.kill(doomed, signal.SIGKILL)
        self._killed = True
        self.close_kept_session()
        return len(doomed)

    def restart_after_crash(self, timeout: float = 60.0) -> None:
        """Start again in place after crash(): once every process of the old postmaster
        is gone (a survivor would hold the shared memory), crash recovery replays the
        WAL and the node serves with what it had flushed."""
        if self._process is not None:
            self._process.wait(10.0)
        kill_inside(self.datadir)
        self.close_kept_session()
        self.start(timeout)

    def fence(self) -> int:
        """STONITH: SIGKILL the postmaster and every process under it, frozen or not
        (SIGKILL reaches stopped processes too). An HA manager does this before it
        promotes another node, so that the old primary cannot wake up and take
        writes. A postmaster that is already dead needs nothing: its backends exit
        when they see it gone. Quick, without waiting: it runs inside the measured
        failover window. Returns how many processes were signalled."""
        if self._process is None or not self._process.running():
            return 0
        killed = self.transport.kill(self.transport.processes(self._process.pid), signal.SIGKILL)
        self._killed = True
        self.close_kept_session()
        return killed

    def freeze(self) -> None:
        self.signal(signal.SIGSTOP, whole_group=True)

    def thaw(self) -> None:
        self.signal(signal.SIGCONT, whole_group=True)

    def destroy(self) -> None:
        """Immediate shutdown whatever the state (frozen, killed, half started)."""
        if self._process is None:
            return
        self._thaw_all()
        with contextlib.suppress(psycopg.Error):
            self.close_kept_session()
        self._process.stop(signal.SIGQUIT, timeout=10)
        kill_inside(self.datadir)
        release_segment(self.datadir)  # a crashed postmaster's: nobody else would

    # -- state ---------------------------------------------------------------------
    def is_in_recovery(self) -> bool:
        return bool(self.value("SELECT pg_is_in_recovery()"))

    def wal_positions(self, *, kept: bool = False) -> WalPositions:
        row = self.sql(
            "SELECT pg_is_in_recovery(),"
            " CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn() END,"
            " CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_insert_lsn() END,"
            " pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()",
            kept=kept,
        )[0]
        return WalPositions(bool(row[0]), *(lsn_to_int(v) for v in row[1:]))

    def timeline(self) -> int:
        """The timeline the node is on now (a promoted standby's new one at once)."""
        if self.is_in_recovery():
            received = self.value("SELECT received_tli FROM pg_stat_wal_receiver")
            if received:
                return int(received)
            return int(self.value("SELECT timeline_id FROM pg_control_checkpoint()"))
        walfile = self.value("SELECT pg_walfile_name(pg_current_wal_lsn())")
        return int(str(walfile)[:8], 16)

    def logs(self, lines: int | None = None) -> str:
        text = self.transport.read_text(self.log_path) or ""
        return text if lines is None else "\n".join(text.splitlines()[-lines:])

    # -- roles -----------------------------------------------------------------------
    def promote(self, timeout: int = 60, *, kept: bool = False) -> None:
        """pg_promote(wait => true): returns once the node accepts writes."""
        if not self.value("SELECT pg_promote(true, %s)", [timeout], kept=kept):
            raise ClusterError(
                f"{self.name} did not finish promotion within {timeout}s:\n{self.logs(20)}"
            )
        self.upstream = None

    def ensure_slot(self, slot: str) -> None:
        self.sql(
            "SELECT pg_create_physical_replication_slot(%s, true) WHERE NOT EXISTS "
            "(SELECT 1 FROM pg_replication_slots WHERE slot_name = %s)",
            [slot, slot],
        )

    def replica_settings(self, upstream: Node) -> dict[str, str]:
        path = self.replication_path
        host, port = path.route(upstream) if path else (upstream.host, upstream.port)
        conninfo = make_conninfo(
            host=host,
            port=str(port),
            user="replicator",
            password=self.credentials.replicator,
            application_name=self.name,
            connect_timeout="2",
        )
        return {
            "primary_conninfo": conf.quote(conninfo),
            "primary_slot_name": conf.quote(self.name),
        }

    def configure_as_replica(self, upstream: Node) -> None:
        self.write_conf(self.replica_settings(upstream))
        signal_file = self.datadir / "standby.signal"
        signal_file.touch()
        self._context.identity.own(signal_file)
        self.upstream = upstream

    def follow(self, upstream: Node) -> None:
        """Repoint a running standby at another upstream: primary_conninfo reloads
        without a restart since PostgreSQL 13."""
        upstream.ensure_slot(self.name)
        self.configure_as_replica(upstream)
        self.sql("SELECT pg_reload_conf()")

    def rejoin(self, new_primary: Node, *, rewind: bool = True, timeout: float = 60.0) -> str:
        """Make this node (e.g. a failed old primary) a standby of new_primary. With
        rewind, pg_rewind first undoes what this node wrote after the timelines
        diverged; when they did not, the output says "no rewind required" and why."""
        if self.running():
            self.stop("fast")
        self.close_kept_session()
        if self._process is not None:
            self._thaw_all()
            if self._killed:  # until reaped, its pid keeps postmaster.pid "in use"
                self._process.wait(10.0)
            kill_inside(self.datadir)  # orphans of a crash would hold the data directory
        output = self._rewind_if_diverged(new_primary) if rewind else ""
        # pg_rewind copies the source's files, our include file among them; the slots
        # this node had as a primary would only hold back WAL on a standby.
        self.clear_slots()
        new_primary.ensure_slot(self.name)
        self.configure_as_replica(new_primary)
        self.start(timeout)
        return output

    def _rewind_if_diverged(self, new_primary: Node) -> str:
        """pg_rewind when this node's WAL left the new primary's timeline history, as
        Patroni decides: a standby's WAL ends at its minimum recovery point, a cleanly
        stopped primary's at its shutdown checkpoint. A crashed primary's end is
        unknown until crash recovery, which pg_rewind runs itself (single-user).

        Only a node about to be rewound may go through that single-user recovery: it
        ends with a checkpoint record of the node's own, and on a standby already on
        the new primary's timeline that record is one the primary never wrote (the
        standby then waits forever for WAL it cannot read)."""
        # pg_rewind before 16 reads the source's timeline from its control file,
        # which only a checkpoint after the promotion updates.
        new_primary.sql("CHECKPOINT")
        control = self.control_data()
        state = control["Database cluster state"]
        if state in ("shut down", *timelines.IN_RECOVERY_STATES):
            local = timelines.wal_end(control)
            primary_timeline, history = _timeline_history(new_primary)
            if not timelines.diverged(local, primary_timeline, history):
                return (
                    f"no rewind required: {self.name} ends on {local}, within the history "
                    f"of {new_primary.name}'s timeline {primary_timeline}"
                )
        if not state.startswith("shut down"):
            # Single-user crash recovery refuses standby mode.
            for name in ("standby.signal", "recovery.signal"):
                (self.datadir / name).unlink(missing_ok=True)
        return self.transport.run(
            [
                self.binaries.program("pg_rewind"),
                f"--target-pgdata={self.datadir}",
                f"--source-server={new_primary.dsn(SUPERUSER, 'postgres')}",
                "--progress",
            ],
            cwd=self.datadir,
            env=base_env(),
            what=f"pg_rewind of {self.name}",
        )

    def control_data(self) -> dict[str, str]:
        """pg_controldata's fields: "Database cluster state" ("in production", "shut
        down", "shut down in recovery", ...), checkpoint and recovery positions."""
        output = self.transport.run(
            [self.binaries.program("pg_controldata"), "-D", str(self.datadir)],
            cwd=self.datadir,
            env=base_env(),
            what=f"pg_controldata of {self.name}",
        )
        fields = {}
        for line in output.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if "Database cluster state" not in fields:
            raise ClusterError(f"pg_controldata of {self.name} printed no cluster state")
        return fields

    def clear_slots(self) -> None:
        """Drop the replication slots a cloned data directory inherited."""
        slots = self.datadir / "pg_replslot"
        for slot in slots.iterdir() if slots.exists() else []:
            shutil.rmtree(slot, ignore_errors=True)


def _signal_number(signum: int | str) -> int:
    if isinstance(signum, str):
        if signum.lower() not in SIGNAL_NAMES:
            raise PghaConfigError.invalid(
                "signal", signum, f"use a number or one of {', '.join(SIGNAL_NAMES)}"
            )
        return SIGNAL_NAMES[signum.lower()]
    return int(signum)


def _timeline_history(node: Node) -> tuple[int, str]:
    """The node's current timeline and its history file ("" on timeline 1)."""
    timeline = int(node.value("SELECT timeline_id FROM pg_control_checkpoint()"))
    if timeline == 1:
        return timeline, ""
    history = node.value("SELECT pg_read_file(%s)", [f"pg_wal/{timeline:08X}.history"])
    return timeline, str(history)
