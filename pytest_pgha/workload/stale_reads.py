"""A stale-read prober: one writer bumps a counter on the primary and notes, per value,
when the commit was acknowledged and the WAL position after it; one reader per read
endpoint reads the counter and the serving node's replay position in one query.
metrics.staleness judges the two logs.

Threads in one process: the figures are LSN positions and wall-clock times taken
around each statement, and the prober's own lateness only makes reads start later,
which it records (a read is judged against what was acknowledged before it began).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

TABLE = "pgha_stale_probe"
SETUP_SQL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (id int PRIMARY KEY, v bigint NOT NULL);"
    f"INSERT INTO {TABLE} VALUES (1, 0) ON CONFLICT (id) DO NOTHING"
)
WRITE_SQL = f"UPDATE {TABLE} SET v = v + 1 WHERE id = 1 RETURNING v"
POSITION_SQL = "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"
READ_SQL = f"SELECT v, pg_last_wal_replay_lsn() - '0/0'::pg_lsn FROM {TABLE} WHERE id = 1"


@dataclass(frozen=True)
class Write:
    value: int
    acked_us: int  # wall clock, when COMMIT returned
    commit_lsn: int  # the WAL insert position right after the commit


@dataclass(frozen=True)
class Read:
    endpoint: str
    started_us: int
    value: int  # the largest value the read saw (0: none yet)
    replay_lsn: int | None  # the serving node's pg_last_wal_replay_lsn(), None on a primary


def _now_us() -> int:
    return time.time_ns() // 1000


class StaleReadProber:
    """Write every write_interval_s, read every read_interval_s on each endpoint (a
    conninfo by name), until the block ends. Endpoints must reach the table that
    `setup()` creates on the primary (a replica streams it)."""

    def __init__(
        self,
        primary: str,
        endpoints: Mapping[str, str],
        *,
        write_interval_s: float = 0.002,
        read_interval_s: float = 0.002,
    ) -> None:
        if not endpoints:
            raise ValueError("give at least one read endpoint")
        self.primary = primary
        self.endpoints = dict(endpoints)
        self.write_interval_s = write_interval_s
        self.read_interval_s = read_interval_s
        self.writes: list[Write] = []
        self.reads: list[Read] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def setup(self) -> None:
        with psycopg.connect(self.primary, autocommit=True) as conn:
            conn.execute(SETUP_SQL)

    def __enter__(self) -> StaleReadProber:
        self._threads = [threading.Thread(target=self._write, name="stale-writer", daemon=True)]
        self._threads += [
            threading.Thread(target=self._read, args=(name, dsn), name=f"stale-{name}", daemon=True)
            for name, dsn in self.endpoints.items()
        ]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10.0)

    def _write(self) -> None:
        try:
            with psycopg.connect(self.primary, autocommit=True) as conn:
                while not self._stop.is_set():
                    value = _first(conn.execute(WRITE_SQL).fetchone())
                    acked_us = _now_us()
                    lsn = _first(conn.execute(POSITION_SQL).fetchone())
                    self.writes.append(Write(int(value), acked_us, int(lsn)))
                    self._stop.wait(self.write_interval_s)
        except psycopg.Error as error:
            self._record_error("writer", error)

    def _read(self, name: str, dsn: str) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                while not self._stop.is_set():
                    started_us = _now_us()
                    row = conn.execute(READ_SQL).fetchone()
                    assert row is not None
                    replay = None if row[1] is None else int(row[1])
                    with self._lock:
                        self.reads.append(Read(name, started_us, int(row[0]), replay))
                    self._stop.wait(self.read_interval_s)
        except psycopg.Error as error:
            self._record_error(name, error)

    def _record_error(self, who: str, error: psycopg.Error) -> None:
        with self._lock:
            self.errors.append(f"{who}: {error}")


def _first(row: tuple[Any, ...] | None) -> Any:
    assert row is not None
    return row[0]
