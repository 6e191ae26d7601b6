"""The reconnecting write workload: N workers, each with one logical connection to the
endpoint, running pgbench's account UPDATE inside BEGIN..COMMIT. On any error a worker
records it, closes, reconnects and resumes, as production pools do (pgbench aborts the
client instead, which would measure pgbench rather than the stack).

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

import random
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.workload.errors import classify
from pytest_pgha.workload.records import Outcome, TxRecord

ACCOUNTS_PER_SCALE = 100_000
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_SELECT = b"SELECT abalance FROM pgbench_accounts WHERE aid = %d"
_UPDATE = b"UPDATE pgbench_accounts SET abalance = abalance + %d WHERE aid = %d"


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
    mode: str = "write"

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= 256:
            raise PghaConfigError.invalid("workers", self.workers, "use 1..256 workers")
        if self.mode not in ("write", "read"):
            raise PghaConfigError.invalid("mode", self.mode, "use 'write' or 'read'")
        if self.rate is not None and self.rate <= 0:
            raise PghaConfigError.invalid("rate", self.rate, "use a positive rate or None")


class _Worker:
    def __init__(
        self, client_id: int, dsn: str, options: WorkloadOptions, stop: threading.Event
    ) -> None:
        self.client_id = client_id
        self.dsn = dsn
        self.options = options
        self.stop = stop
        self.rows: list[tuple[int, int, str, str | None, bool]] = []
        self.in_flight_since_ns = 0  # wall clock; 0 when idle
        self.socket_fd: int = -1
        self.reconnects = 0
        self._rng = random.Random(client_id * 7919 + time.time_ns())
        self._naccounts = ACCOUNTS_PER_SCALE * options.scale
        self._interval = options.workers / options.rate if options.rate else 0.0
        self._writes = options.mode == "write"

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
            failed = self._transaction(conn.pgconn) if self._writes else self._read(conn.pgconn)
            if failed:
                conn.close()
                conn = None
                self.reconnects += 1
                if last_failed:
                    self.stop.wait(self.options.retry_backoff_s)
            last_failed = failed
        if conn is not None:
            conn.close()

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
                result = exec_(update)
                if result.status == _COMMAND_OK:
                    stage = "commit"
                    result = exec_(b"COMMIT")
                    if result.status == _COMMAND_OK:
                        self.in_flight_since_ns = 0
                        self.rows.append(
                            (start_ns // 1000, time.time_ns() // 1000, "ok", None, False)
                        )
                        return False
            sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
        except psycopg.Error:
            sqlstate = None
        self.in_flight_since_ns = 0
        return self._failed(start_ns // 1000, stage, sqlstate, pgconn)

    def _read(self, pgconn: pq.abc.PGconn) -> bool:
        select = _SELECT % (int(self._rng.random() * self._naccounts) + 1)
        start_ns = time.time_ns()
        self.in_flight_since_ns = start_ns
        try:
            result = pgconn.exec_(select)
            if result.status == _TUPLES_OK:
                self.in_flight_since_ns = 0
                self.rows.append((start_ns // 1000, time.time_ns() // 1000, "ok", None, False))
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
        return True

    def records(self) -> Iterator[TxRecord]:
        for txn_no, (start, end, outcome, sqlstate, broken) in enumerate(self.rows):
            yield TxRecord(self.client_id, txn_no, start, end, Outcome(outcome), sqlstate, broken)


class WorkloadDriver:
    """Start with `with WorkloadDriver(dsn) as driver: ...`; read `driver.records()`."""

    def __init__(self, dsn: str, options: WorkloadOptions | None = None) -> None:
        self.dsn = dsn
        self.options = options or WorkloadOptions()
        self._stop = threading.Event()
        self._workers = [
            _Worker(i, dsn, self.options, self._stop) for i in range(self.options.workers)
        ]
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

    def __enter__(self) -> WorkloadDriver:
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

    def records(self) -> list[TxRecord]:
        merged = [r for w in self._workers for r in w.records()]
        merged.sort(key=lambda r: (r.end_us, r.client_id))
        return merged

    def reconnects(self) -> int:
        return sum(w.reconnects for w in self._workers)

    def workers_recovered(self, since_us: int) -> int:
        """Workers whose latest transaction committed after since_us."""
        recovered = 0
        for worker in self._workers:
            last = worker.rows[-1] if worker.rows else None
            recovered += bool(last and last[2] == "ok" and last[1] >= since_us)
        return recovered

    def ok_count(self) -> int:
        return sum(1 for w in self._workers for row in w.rows if row[2] == "ok")


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
