"""The reconnecting write workload: N workers, each with one logical connection to the
endpoint, running pgbench's account UPDATE inside BEGIN..COMMIT. On any error a worker
records it, closes, reconnects and resumes, as production pools do (pgbench aborts the
client instead, which would measure pgbench rather than the stack).

Built like pgbench: an event loop drives many non-blocking libpq connections
(psycopg's `pgconn`, psycopg 3's libpq binding), so a server reply costs one poll and
no thread hand-off. Measured here (8 clients, 2 cores): a thread per connection spent
63 us of CPU per transaction, two loops 66 us (they contend for the GIL), one loop
50 us (pgbench: 41 us); CPU the client spends is CPU the server lacks.
Connecting blocks (TLS-less SCRAM login, or a frozen host until connect_timeout), so
it runs in a helper pool and hands the new connection back to its loop: a slow
reconnect never stalls the other workers.
"""

from __future__ import annotations

import heapq
import os
import random
import select
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import pq

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.workload.errors import classify
from pytest_pgha.workload.records import Outcome, TxRecord

ACCOUNTS_PER_SCALE = 100_000
_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)
_SELECT = b"SELECT abalance FROM pgbench_accounts WHERE aid = %d"
_UPDATE = b"UPDATE pgbench_accounts SET abalance = abalance + %d WHERE aid = %d"
_READABLE = select.EPOLLIN | select.EPOLLERR | select.EPOLLHUP
# The loop wakes at least this often to enforce statement timeouts and pacing.
_TICK_S = 0.02

Row = tuple[int, int, str, str | None, bool]  # start_us, end_us, outcome, sqlstate, broken


@dataclass(frozen=True)
class WorkloadOptions:
    workers: int = 8
    scale: int = 1
    # Backoff after an error that followed an error (a failed retry); the first retry
    # after an in-flight failure is immediate, as in the failover lab's driver.
    retry_backoff_s: float = 0.01
    # A client-side statement timeout: a frozen server's kernel still ACKs, so TCP
    # keepalives never fire and only the client can give up.
    statement_timeout_s: float | None = 5.0
    # Transactions per second over all workers; None = as fast as possible.
    rate: float | None = None
    # "write": BEGIN; UPDATE pgbench_accounts ...; COMMIT (the lab's workload).
    # "read": one SELECT of an account, for read paths through replicas.
    mode: str = "write"
    # Event loops (threads). One is the cheapest in CPU per transaction (see above).
    loops: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= 256:
            raise PghaConfigError.invalid("workers", self.workers, "use 1..256 workers")
        if self.mode not in ("write", "read"):
            raise PghaConfigError.invalid("mode", self.mode, "use 'write' or 'read'")
        if self.rate is not None and self.rate <= 0:
            raise PghaConfigError.invalid("rate", self.rate, "use a positive rate or None")
        if not 1 <= self.loops <= self.workers:
            raise PghaConfigError.invalid("loops", self.loops, "use 1..workers event loops")


@dataclass(eq=False, slots=True)
class _Worker:
    """One logical client: its connection, where it is in its transaction, its log."""

    client_id: int
    rng: random.Random
    rows: list[Row] = field(default_factory=list)
    conn: psycopg.Connection[Any] | None = None
    pgconn: Any = None  # conn.pgconn, looked up once per connection
    fd: int = -1
    statements: tuple[bytes, ...] = ()
    stage: int = 0
    start_ns: int = 0  # 0 when no transaction is in flight
    next_at: float = 0.0  # monotonic: when the next transaction may start
    last_failed: bool = False
    reconnects: int = 0


class _Loop:
    """One thread's event loop over its workers' connections."""

    def __init__(self, driver: WorkloadDriver, workers: list[_Worker]) -> None:
        self.driver = driver
        self.options = driver.options
        self.workers = workers
        self.epoll = select.epoll()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        self.epoll.register(self.wake_r, select.EPOLLIN)
        self.by_fd: dict[int, _Worker] = {}
        self.connected: deque[_Worker] = deque()  # handed back by the connect pool
        self.timers: list[tuple[float, int, _Worker]] = []  # (when, client_id, worker)
        self.interval = self.options.workers / self.options.rate if self.options.rate else 0.0
        naccounts = ACCOUNTS_PER_SCALE * self.options.scale
        self.naccounts = naccounts
        self.thread = threading.Thread(target=self.run, name="pgha-workload", daemon=True)

    # -- scheduling ------------------------------------------------------------------------
    def wake(self) -> None:
        # A full pipe means the loop is awake anyway.
        with suppress(BlockingIOError):
            os.write(self.wake_w, b"x")

    def handed_back(self, worker: _Worker) -> None:
        """Called from the connect pool once worker has a connection (or gave up)."""
        self.connected.append(worker)
        self.wake()

    def later(self, worker: _Worker, when: float) -> None:
        heapq.heappush(self.timers, (when, worker.client_id, worker))

    def reconnect(self, worker: _Worker, after_s: float = 0.0) -> None:
        self.driver.connect_async(self, worker, after_s)

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> None:
        for worker in self.workers:
            self.reconnect(worker)
        stop = self.driver.stop_event
        while not stop.is_set():
            timeout = _TICK_S
            if self.timers:
                timeout = min(timeout, max(0.0, self.timers[0][0] - time.monotonic()))
            readable, by_fd, wake_r = self._readable, self.by_fd, self.wake_r
            for fd, _events in self.epoll.poll(timeout):
                if fd == wake_r:
                    self._drain_wake()
                else:
                    readable(by_fd[fd])
            self._take_connected()
            self._run_timers()
            self._enforce_timeouts()
        for worker in self.workers:
            self._close(worker)
        self.epoll.close()

    def close_pipe(self) -> None:
        os.close(self.wake_r)
        os.close(self.wake_w)

    def _drain_wake(self) -> None:
        with suppress(BlockingIOError):
            while os.read(self.wake_r, 4096):
                pass

    def _take_connected(self) -> None:
        while self.connected:
            worker = self.connected.popleft()
            if worker.conn is None:  # the connect failed: try again after the backoff
                self.reconnect(worker, self.options.retry_backoff_s)
                continue
            worker.pgconn = worker.conn.pgconn
            worker.fd = worker.pgconn.socket
            self.by_fd[worker.fd] = worker
            self.epoll.register(worker.fd, _READABLE)
            self._begin(worker)

    def _run_timers(self) -> None:
        now = time.monotonic()
        while self.timers and self.timers[0][0] <= now:
            _, _, worker = heapq.heappop(self.timers)
            if worker.conn is not None:
                self._begin(worker)
            else:  # its connection broke while it waited: BEGIN fails on it
                worker.stage = 0
                self._fail(worker, None, broken=True)

    def _enforce_timeouts(self) -> None:
        limit = self.options.statement_timeout_s
        if limit is None:
            return
        deadline = time.time_ns() - int(limit * 1e9)
        for worker in list(self.by_fd.values()):
            if worker.start_ns and worker.start_ns < deadline:
                self._fail(worker, None, broken=True)

    # -- one transaction ---------------------------------------------------------------------
    def _begin(self, worker: _Worker) -> None:
        now = time.monotonic()
        if self.interval:
            if not worker.next_at:  # the schedule starts with the worker
                worker.next_at = now
            if worker.next_at > now:
                self.later(worker, worker.next_at)
                return
            # Catch up at most one second of schedule after a stall, as pgbench -R.
            worker.next_at = max(worker.next_at + self.interval, now - 1.0)
        rand = worker.rng.random
        if self.options.mode == "write":
            update = _UPDATE % (int(rand() * 10001) - 5000, int(rand() * self.naccounts) + 1)
            worker.statements = (b"BEGIN", update, b"COMMIT")
        else:
            worker.statements = (_SELECT % (int(rand() * self.naccounts) + 1),)
        worker.stage = 0
        worker.start_ns = time.time_ns()
        self._send(worker)

    def _send(self, worker: _Worker) -> None:
        try:
            worker.pgconn.send_query(worker.statements[worker.stage])
        except psycopg.Error:
            self._fail(worker, None, broken=True)

    def _readable(self, worker: _Worker) -> None:
        """A reply arrived (the hot path: ~30k calls a second)."""
        pgconn = worker.pgconn
        try:
            pgconn.consume_input()
            if pgconn.is_busy():
                return
            result = pgconn.get_result()
            while pgconn.get_result() is not None:  # the end of this statement's results
                pass
        except psycopg.Error:
            self._fail(worker, None, broken=True)
            return
        if not worker.start_ns:
            # The server closed an idle connection: the application finds out when it
            # next uses it, at its next scheduled transaction.
            self._close(worker)
            return
        if result is None or result.status not in _OK:
            sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE) if result else None
            broken = pgconn.status == pq.ConnStatus.BAD
            self._fail(worker, sqlstate.decode() if sqlstate else None, broken=broken)
            return
        stage = worker.stage = worker.stage + 1
        if stage < len(worker.statements):
            try:
                pgconn.send_query(worker.statements[stage])
            except psycopg.Error:
                self._fail(worker, None, broken=True)
            return
        worker.rows.append((worker.start_ns // 1000, time.time_ns() // 1000, "ok", None, False))
        worker.start_ns = 0
        worker.last_failed = False
        self._begin(worker)

    def _fail(self, worker: _Worker, sqlstate: str | None, *, broken: bool) -> None:
        """Record the failure, close, reconnect: at once after an in-flight error,
        after the backoff when it follows another error (a failed retry)."""
        stages = ("begin", "update", "commit") if self.options.mode == "write" else ("select",)
        stage = stages[min(worker.stage, len(stages) - 1)]
        outcome = classify(stage, sqlstate, broken)
        start_us = (worker.start_ns or time.time_ns()) // 1000
        worker.rows.append((start_us, time.time_ns() // 1000, outcome.value, sqlstate, broken))
        worker.start_ns = 0
        self._close(worker)
        worker.reconnects += 1
        backoff = self.options.retry_backoff_s if worker.last_failed else 0.0
        worker.last_failed = True
        self.reconnect(worker, backoff)

    def _close(self, worker: _Worker) -> None:
        if worker.fd >= 0 and self.by_fd.pop(worker.fd, None) is not None:
            with suppress(OSError):
                self.epoll.unregister(worker.fd)
        worker.fd = -1
        worker.pgconn = None
        if worker.conn is not None:
            worker.conn.close()
            worker.conn = None


class WorkloadDriver:
    """Start with `with WorkloadDriver(dsn) as driver: ...`; read `driver.records()`."""

    def __init__(self, dsn: str, options: WorkloadOptions | None = None) -> None:
        self.dsn = dsn
        self.options = options or WorkloadOptions()
        self.stop_event = threading.Event()
        workers = [_Worker(i, random.Random(i * 7919 + time.time_ns()))
                   for i in range(self.options.workers)]
        count = self.options.loops
        self._workers = workers
        self._loops = [_Loop(self, workers[i::count]) for i in range(count)]
        # Every worker may be reconnecting at once during a failover.
        self._pool = ThreadPoolExecutor(max_workers=self.options.workers,
                                        thread_name_prefix="pgha-connect")
        self.started_us = 0
        self.stopped_us = 0

    def connect_async(self, loop: _Loop, worker: _Worker, after_s: float) -> None:
        if not self.stop_event.is_set():
            self._pool.submit(self._connect, loop, worker, after_s)

    def _connect(self, loop: _Loop, worker: _Worker, after_s: float) -> None:
        if after_s and self.stop_event.wait(after_s):
            return
        start = time.time_ns() // 1000
        try:
            conn = psycopg.Connection.connect(self.dsn, autocommit=True)
            if self.stop_event.is_set():
                conn.close()
                return
            worker.conn = conn
        except psycopg.Error as error:
            worker.rows.append((start, time.time_ns() // 1000, Outcome.CONNECT_FAILED.value,
                                error.sqlstate, True))
            worker.conn = None
        loop.handed_back(worker)

    def start(self) -> None:
        self.started_us = time.time_ns() // 1000
        for loop in self._loops:
            loop.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        for loop in self._loops:
            loop.wake()
        for loop in self._loops:
            loop.thread.join(timeout=10)
            loop.close_pipe()
        # A connect in flight may take connect_timeout; its worker is done anyway.
        self._pool.shutdown(wait=False, cancel_futures=True)
        for worker in self._workers:
            if worker.conn is not None and worker.fd < 0:  # connected after the loop ended
                worker.conn.close()
        self.stopped_us = time.time_ns() // 1000

    def __enter__(self) -> WorkloadDriver:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def records(self) -> list[TxRecord]:
        merged = [
            TxRecord(w.client_id, txn_no, start, end, Outcome(outcome), sqlstate, broken)
            for w in self._workers
            for txn_no, (start, end, outcome, sqlstate, broken) in enumerate(list(w.rows))
        ]
        merged.sort(key=lambda r: (r.end_us, r.client_id))
        return merged

    def reconnects(self) -> int:
        return sum(w.reconnects for w in self._workers)

    def ok_count(self) -> int:
        return sum(1 for w in self._workers for row in list(w.rows) if row[2] == "ok")


@contextmanager
def running_workload(dsn: str, options: WorkloadOptions | None = None
                     ) -> Iterator[WorkloadDriver]:
    driver = WorkloadDriver(dsn, options)
    driver.start()
    try:
        yield driver
    finally:
        driver.stop()
