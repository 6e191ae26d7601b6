"""The reconnecting write workload: N workers, each with one logical connection to the
endpoint, running pgbench's account UPDATE inside BEGIN..COMMIT. On any error a worker
records it, closes, reconnects and resumes, as production pools do (pgbench aborts the
client instead, which would measure pgbench rather than the stack).

The workers run as threads of a process of their own (`WorkloadDriver`), never in the
harness's interpreter: right after a fault they storm-reconnect, and the HA manager,
its probe and the proxy sampler must not wait for the interpreter lock then. The
process measures its own scheduling error with a heartbeat (`pytest_pgha.lag`), since
its clock stamps every transaction.

The hot path talks to libpq through psycopg's `pgconn` (psycopg 3's libpq binding):
its exec_() releases the GIL while it waits on the server. Connecting goes through
psycopg.Connection, which waits without holding the GIL (a bare PQconnectdb would block
every worker for up to connect_timeout during a failover).

Measured here (8 clients, 2 cores, benchmarks/driver_throughput.py): ~60 us of client
CPU per transaction against pgbench's ~41, i.e. 0.8x pgbench's throughput, where a
psycopg cursor per worker reached 0.58x. An event loop over non-blocking connections
cut the client CPU to ~50 us but gained no throughput and was harder to get right
under reconnect storms, so the simple design stays.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import random
import resource
import signal
import socket
import threading
import time
from collections.abc import Iterable, Iterator, MutableSequence, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import psutil
import psycopg
from psycopg import pq

from pytest_pgha.errors import PghaConfigError, PghaError
from pytest_pgha.lag import (
    WORKLOAD_NICENESS,
    Heartbeat,
    LagMeter,
    LagSummary,
    in_window,
    prioritise,
)
from pytest_pgha.workload.errors import classify
from pytest_pgha.workload.ledger import (
    LedgerEntry,
    LedgerRow,
    LedgerTrail,
    SessionInfo,
    begin_statement,
    ledger_entries,
)
from pytest_pgha.workload.prober import EventLike
from pytest_pgha.workload.records import Outcome, TxRecord

ACCOUNTS_PER_SCALE = 100_000
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_SELECT = b"SELECT abalance FROM pgbench_accounts WHERE aid = %d"
_UPDATE = b"UPDATE pgbench_accounts SET abalance = abalance + %d WHERE aid = %d"
MODES = ("write", "read", "ledger")


@dataclass(frozen=True)
class WorkloadOptions:
    workers: int = 8
    scale: int = 1
    # Backoff after an error that followed an error (a failed retry); the first retry
    # after an in-flight failure is immediate, as in the failover lab's driver.
    retry_backoff_s: float = 0.01
    # A client-side statement timeout, enforced by shutting the socket down: a frozen
    # server's kernel still ACKs, so TCP keepalives never fire.
    statement_timeout_s: float | None = 5.0
    # Transactions per second over all workers; None = as fast as possible.
    rate: float | None = None
    # "write": BEGIN; UPDATE pgbench_accounts ...; COMMIT (the lab's workload).
    # "read": one SELECT of an account, for read paths through replicas.
    # "ledger": BEGIN; INSERT a unique row into the ledger ...; COMMIT, auditable
    # afterwards (pytest_pgha.workload.ledger).
    mode: str = "write"
    # The ledger's trial: every row a ledger workload writes carries it.
    trial: int = 0
    # Settings the application sets in each transaction (SET LOCAL, sent with BEGIN in
    # one round trip, so that they survive transaction pooling), e.g.
    # {"synchronous_commit": "local"}.
    session_settings: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= 256:
            raise PghaConfigError.invalid("workers", self.workers, "use 1..256 workers")
        if self.mode not in MODES:
            raise PghaConfigError.invalid("mode", self.mode, f"use one of {', '.join(MODES)}")
        if self.rate is not None and self.rate <= 0:
            raise PghaConfigError.invalid("rate", self.rate, "use a positive rate or None")
        begin_statement(self.session_settings)  # validates the names here, not in a child


Row = tuple[int, int, str, "str | None", bool]  # start_us, end_us, outcome, sqlstate, broken


class _Worker:
    def __init__(
        self,
        client_id: int,
        dsn: str,
        options: WorkloadOptions,
        stop: threading.Event,
        last_ok: MutableSequence[int],
    ) -> None:
        self.client_id = client_id
        self.dsn = dsn
        self.options = options
        self.stop = stop
        # Shared with the harness: end_us of this worker's latest transaction if it
        # committed, 0 if it failed (what `workers_recovered` reads without a round trip).
        self.last_ok = last_ok
        self.rows: list[Row] = []
        self.in_flight_since_ns = 0  # wall clock; 0 when idle
        self.socket_fd: int = -1
        self.reconnects = 0
        self._rng = random.Random(client_id * 7919 + time.time_ns())
        self._naccounts = ACCOUNTS_PER_SCALE * options.scale
        self._interval = options.workers / options.rate if options.rate else 0.0
        self._writes = options.mode == "write"
        self.ledger: LedgerTrail | None = (
            LedgerTrail(options.trial, client_id, options.session_settings)
            if options.mode == "ledger"
            else None
        )

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        last_failed = False
        next_at = time.monotonic()
        while not self.stop.is_set():
            if self._interval:
                next_at = self._pace(next_at)
            if conn is None:
                conn = self._connect()
                if conn is None:
                    last_failed = True
                    self.stop.wait(self.options.retry_backoff_s)
                    continue
            failed = self._attempt(conn.pgconn)
            if failed:
                conn.close()
                conn = None
                self.reconnects += 1
                if last_failed:
                    self.stop.wait(self.options.retry_backoff_s)
            last_failed = failed
        if conn is not None:
            conn.close()

    def _attempt(self, pgconn: pq.abc.PGconn) -> bool:
        if self._writes:
            return self._transaction(pgconn)
        if self.ledger is not None:
            return self._ledger_transaction(pgconn, self.ledger)
        return self._read(pgconn)

    def _pace(self, next_at: float) -> float:
        delay = next_at - time.monotonic()
        if delay > 0:
            self.stop.wait(delay)
        return max(next_at + self._interval, time.monotonic() - 1.0)

    def _connect(self) -> psycopg.Connection[Any] | None:
        start = time.time_ns() // 1000
        try:
            conn = psycopg.Connection.connect(self.dsn, autocommit=True)
        except psycopg.Error as error:
            end = time.time_ns() // 1000
            self.rows.append((start, end, Outcome.CONNECT_FAILED.value, error.sqlstate, True))
            return None
        self.socket_fd = conn.pgconn.socket
        if self.ledger is not None:
            self.ledger.connected(conn.pgconn)
        return conn

    def _transaction(self, pgconn: pq.abc.PGconn) -> bool:
        """One BEGIN/UPDATE/COMMIT; records it and returns True when it failed.

        Written for speed: it runs ~10k times a second on a 2-core machine and every
        microsecond of Python here is one the server does not get."""
        rand = self._rng.random
        update = _UPDATE % (int(rand() * 10001) - 5000, int(rand() * self._naccounts) + 1)
        exec_ = pgconn.exec_
        start_ns = time.time_ns()
        self.in_flight_since_ns = start_ns
        stage = "begin"
        try:
            result = exec_(b"BEGIN")
            if result.status == _COMMAND_OK:
                stage = "update"
                self.in_flight_since_ns = time.time_ns()
                result = exec_(update)
                if result.status == _COMMAND_OK:
                    stage = "commit"
                    self.in_flight_since_ns = time.time_ns()
                    result = exec_(b"COMMIT")
                    if result.status == _COMMAND_OK:
                        self.in_flight_since_ns = 0
                        end_us = time.time_ns() // 1000
                        self.rows.append((start_ns // 1000, end_us, "ok", None, False))
                        self.last_ok[self.client_id] = end_us
                        return False
            sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
        except psycopg.Error:
            sqlstate = None
        self.in_flight_since_ns = 0
        return self._failed(start_ns // 1000, stage, sqlstate, pgconn)

    def _ledger_transaction(self, pgconn: pq.abc.PGconn, ledger: LedgerTrail) -> bool:
        """BEGIN; INSERT one row with a unique key RETURNING its xid, an LSN and the
        server's port; COMMIT: three round trips, as the write workload's."""
        exec_ = pgconn.exec_
        insert = ledger.next_insert()
        txn_no = len(self.rows)
        start_ns = time.time_ns()
        self.in_flight_since_ns = start_ns
        stage = "begin"
        try:
            result = exec_(ledger.begin)
            if result.status == _COMMAND_OK:
                stage = "update"
                self.in_flight_since_ns = time.time_ns()
                result = exec_(insert)
                if result.status == _TUPLES_OK:
                    ledger.returned(txn_no, result)
                    stage = "commit"
                    self.in_flight_since_ns = time.time_ns()
                    result = exec_(b"COMMIT")
                    if result.status == _COMMAND_OK:
                        self.in_flight_since_ns = 0
                        end_us = time.time_ns() // 1000
                        self.rows.append((start_ns // 1000, end_us, "ok", None, False))
                        self.last_ok[self.client_id] = end_us
                        return False
            sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
        except psycopg.Error:
            sqlstate = None
        self.in_flight_since_ns = 0
        ledger.attempted(txn_no)
        return self._failed(start_ns // 1000, stage, sqlstate, pgconn)

    def _read(self, pgconn: pq.abc.PGconn) -> bool:
        select = _SELECT % (int(self._rng.random() * self._naccounts) + 1)
        start_ns = time.time_ns()
        self.in_flight_since_ns = start_ns
        try:
            result = pgconn.exec_(select)
            if result.status == _TUPLES_OK:
                self.in_flight_since_ns = 0
                end_us = time.time_ns() // 1000
                self.rows.append((start_ns // 1000, end_us, "ok", None, False))
                self.last_ok[self.client_id] = end_us
                return False
            sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
        except psycopg.Error:
            sqlstate = None
        self.in_flight_since_ns = 0
        return self._failed(start_ns // 1000, "select", sqlstate, pgconn)

    def _failed(
        self, start: int, stage: str, sqlstate: bytes | None, pgconn: pq.abc.PGconn
    ) -> bool:
        state = sqlstate.decode() if sqlstate else None
        broken = pgconn.status == pq.ConnStatus.BAD
        outcome = classify(stage, state, broken)
        self.rows.append((start, time.time_ns() // 1000, outcome.value, state, broken))
        self.last_ok[self.client_id] = 0
        return True


def _records(client_id: int, rows: list[Row]) -> Iterator[TxRecord]:
    for txn_no, (start, end, outcome, sqlstate, broken) in enumerate(rows):
        yield TxRecord(client_id, txn_no, start, end, Outcome(outcome), sqlstate, broken)


def _merge(rows_by_worker: Iterable[tuple[int, list[Row]]]) -> list[TxRecord]:
    merged = [r for client, rows in rows_by_worker for r in _records(client, rows)]
    merged.sort(key=lambda r: (r.end_us, r.client_id))
    return merged


class ThreadedWorkload:
    """The workers as threads of the calling process. The harness runs them through
    `WorkloadDriver`, in a process of their own; this is what runs there."""

    def __init__(
        self,
        dsn: str,
        options: WorkloadOptions | None = None,
        last_ok: MutableSequence[int] | None = None,
        client_ids: Sequence[int] | None = None,
    ) -> None:
        self.dsn = dsn
        self.options = options or WorkloadOptions()
        self._stop = threading.Event()
        self.last_ok = last_ok if last_ok is not None else [0] * self.options.workers
        ids = range(self.options.workers) if client_ids is None else client_ids
        self._workers = [_Worker(i, dsn, self.options, self._stop, self.last_ok) for i in ids]
        self._threads = [
            threading.Thread(target=w.run, name=f"pgha-worker-{w.client_id}", daemon=True)
            for w in self._workers
        ]
        self._watchdog = threading.Thread(
            target=self._enforce_timeouts, name="pgha-watchdog", daemon=True
        )
        self.started_us = 0
        self.stopped_us = 0

    def start(self) -> None:
        self.started_us = time.time_ns() // 1000
        for thread in self._threads:
            thread.start()
        self._watchdog.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=(self.options.statement_timeout_s or 5.0) + 5.0)
        self._watchdog.join(timeout=1)
        self.stopped_us = time.time_ns() // 1000

    def __enter__(self) -> ThreadedWorkload:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _enforce_timeouts(self) -> None:
        limit = self.options.statement_timeout_s
        while limit is not None and not self._stop.wait(0.05):
            now_ns = time.time_ns()
            for worker in self._workers:
                since = worker.in_flight_since_ns
                if since and now_ns - since > limit * 1e9 and worker.socket_fd >= 0:
                    _shutdown_fd(worker.socket_fd)

    def rows(self) -> list[tuple[int, list[Row]]]:
        return [(w.client_id, w.rows) for w in self._workers]

    def records(self) -> list[TxRecord]:
        return _merge(self.rows())

    def ledger(self) -> list[tuple[int, list[LedgerRow], list[SessionInfo]]]:
        """Per worker: its ledger rows and the sessions they ran in (empty unless the
        mode is "ledger")."""
        return [
            (w.client_id, w.ledger.rows, w.ledger.sessions)
            for w in self._workers
            if w.ledger is not None
        ]

    def reconnects(self) -> int:
        return sum(w.reconnects for w in self._workers)


def _alive(pid: int) -> bool:
    """Whether the harness still runs. Not our parent: that is the forkserver, which
    outlives the harness as long as its children hold its keep-alive pipe."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _shutdown_fd(fd: int) -> None:
    """Break a connection under libpq's feet: the blocked PQexec returns an error."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.detach()  # libpq owns the descriptor


@dataclass
class WorkloadReport:
    """What one workload process hands back when it stops."""

    rows: list[tuple[int, list[Row]]]  # (client id, its rows)
    lag: list[tuple[str, int, int]]  # its heartbeat: (source, monotonic ns, lateness ns)
    cpu_s: float
    reconnects: int
    # (client id, its ledger rows, its sessions) when the mode is "ledger".
    ledger: list[tuple[int, list[LedgerRow], list[SessionInfo]]]


STARTUP_TIMEOUT_S = 30.0
RESULTS_TIMEOUT_S = 30.0
_ORPHAN_CHECK_S = 0.1


class _WorkloadProcess:
    """One process of the workload, running some of its workers."""

    def __init__(
        self,
        context: Any,
        dsn: str,
        options: WorkloadOptions,
        last_ok: MutableSequence[int],
        client_ids: list[int],
    ) -> None:
        self.stop_event = context.Event()
        self.ready = context.Event()
        self.results, sender = context.Pipe(duplex=False)
        self.process = context.Process(
            target=workload_process,
            args=(
                dsn,
                options,
                last_ok,
                client_ids,
                os.getpid(),
                self.stop_event,
                self.ready,
                sender,
            ),
            name=f"pgha-workload-{client_ids[0]}",
            daemon=True,
        )
        self.report: WorkloadReport | None = None

    def collect(self, deadline: float) -> None:
        try:
            if self.results.poll(max(0.0, deadline - time.monotonic())):
                self.report = self.results.recv()
        except (EOFError, OSError):
            pass
        finally:
            self.process.join(timeout=max(0.1, deadline - time.monotonic()))
            if self.process.is_alive():
                self.kill()
            self.results.close()

    def kill(self) -> None:
        self.process.kill()
        self.process.join()


class WorkloadDriver:
    """The workload in processes of its own, one per worker by default, as independent
    application instances are: a reconnect storm (each login a SCRAM exchange computed
    while holding the interpreter lock) then delays no other worker's clock. Use
    `with WorkloadDriver(dsn) as driver:`; after the block, `records()` holds every
    transaction."""

    def __init__(
        self, dsn: str, options: WorkloadOptions | None = None, workers_per_process: int = 1
    ) -> None:
        if workers_per_process < 1:
            raise PghaConfigError.invalid(
                "workers_per_process", workers_per_process, "use 1 or more"
            )
        self.dsn = dsn
        self.options = options or WorkloadOptions()
        # forkserver: a clean process with the driver imported forks each workload
        # process (spawn would import psycopg once per worker; fork would copy the
        # harness's running threads' state).
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        self._last_ok = context.RawArray("q", self.options.workers)
        ids = list(range(self.options.workers))
        self._processes = [
            _WorkloadProcess(
                context, dsn, self.options, self._last_ok, ids[i : i + workers_per_process]
            )
            for i in range(0, len(ids), workers_per_process)
        ]
        self.started_us = 0
        self.stopped_us = 0

    @property
    def pids(self) -> list[int]:
        return [p.process.pid for p in self._processes if p.process.pid is not None]

    def start(self) -> None:
        for worker in self._processes:
            worker.process.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for worker in self._processes:
            if not worker.ready.wait(max(0.0, deadline - time.monotonic())):
                for other in self._processes:
                    other.kill()
                raise PghaError(f"the workload processes did not start in {STARTUP_TIMEOUT_S:.0f}s")
        self.started_us = time.time_ns() // 1000

    def stop(self) -> None:
        for worker in self._processes:
            worker.stop_event.set()
        deadline = time.monotonic() + RESULTS_TIMEOUT_S
        for worker in self._processes:
            worker.collect(deadline)
        self.stopped_us = time.time_ns() // 1000
        missing = [w.process.exitcode for w in self._processes if w.report is None]
        if missing:
            raise PghaError(
                f"{len(missing)} workload process(es) ended without their log "
                f"(exit codes {missing})"
            )

    def __enter__(self) -> WorkloadDriver:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def workers_recovered(self, since_us: int) -> int:
        """Workers whose latest transaction committed after since_us (read from memory
        the workload processes share, so asking costs no round trip)."""
        return sum(1 for end_us in self._last_ok if end_us and end_us >= since_us)

    def await_recovered(self, since_us: int, timeout: float) -> None:
        """Until every worker committed after since_us, at most timeout seconds."""
        deadline = time.monotonic() + timeout
        while self.workers_recovered(since_us) < self.options.workers:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.02)

    def _reports(self) -> list[WorkloadReport]:
        reports = [w.report for w in self._processes]
        if any(r is None for r in reports):
            raise PghaError("the workload has not run to its end yet")
        return [r for r in reports if r is not None]

    def records(self) -> list[TxRecord]:
        return _merge(pair for report in self._reports() for pair in report.rows)

    def ledger_entries(self) -> list[LedgerEntry]:
        """Every ledger transaction with its key, xid, LSN and server, in the order the
        records are (mode "ledger")."""
        records = self.records()
        return ledger_entries(
            records, [item for report in self._reports() for item in report.ledger]
        )

    def ok_count(self) -> int:
        return sum(
            1 for r in self._reports() for _, rows in r.rows for row in rows if row[2] == "ok"
        )

    def reconnects(self) -> int:
        return sum(r.reconnects for r in self._reports())

    def lag(self, since_ns: int | None = None, until_ns: int | None = None) -> LagSummary:
        """The workload processes' own scheduling error (their heartbeats) in a window
        of the monotonic clock, which every process of the machine shares."""
        samples = [s for report in self._reports() for s in report.lag]
        return LagSummary.of(in_window(samples, since_ns, until_ns))

    @property
    def cpu_s(self) -> float:
        return sum(r.cpu_s for r in self._reports())


def workload_process(
    dsn: str,
    options: WorkloadOptions,
    last_ok: MutableSequence[int],
    client_ids: list[int],
    harness_pid: int,
    stop: EventLike,
    ready: EventLike,
    results: Connection,
) -> None:
    """The body of a workload process: run its workers until told to stop (or
    orphaned), then hand their log back."""
    # Ctrl-C reaches the whole process group: the harness decides when this one stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Before the workers start, so that they inherit it: the clock that stamps each
    # transaction must not wait behind the servers under test.
    prioritise(WORKLOAD_NICENESS)
    # Rows are tuples of numbers and strings, nothing to collect; a collection pass
    # over them would stall the clock for no gain in a process that lives seconds.
    gc.disable()
    meter = LagMeter()
    workload = ThreadedWorkload(dsn, options, last_ok, client_ids)
    with Heartbeat(meter):
        workload.start()
        ready.set()
        while not stop.wait(_ORPHAN_CHECK_S):
            if not _alive(harness_pid):
                break
        workload.stop()
    if _alive(harness_pid):  # an orphan has nobody to report to
        usage = resource.getrusage(resource.RUSAGE_SELF)
        results.send(
            WorkloadReport(
                workload.rows(),
                meter.samples(),
                usage.ru_utime + usage.ru_stime,
                workload.reconnects(),
                workload.ledger(),
            )
        )
    results.close()
