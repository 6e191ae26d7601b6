"""Talking to a proxy's admin console: PgBouncer, PgCat and PgDog only speak the
simple query protocol there, so this goes through libpq's PQexec (psycopg's pgconn)
and decodes the text result itself."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from psycopg import pq

from pytest_pgha.errors import ProxyError


class AdminConsole:
    """One persistent admin connection, reopened after a failure. Thread-safe."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def query(self, sql: str) -> list[dict[str, str | None]]:
        with self._lock:
            try:
                return self._query(sql)
            except (psycopg.Error, ProxyError):
                self.close_unlocked()
                raise

    def _query(self, sql: str) -> list[dict[str, str | None]]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.Connection.connect(self.dsn, autocommit=True)
        result = self._conn.pgconn.exec_(sql.encode())
        if result.status not in (
            pq.ExecStatus.COMMAND_OK,
            pq.ExecStatus.TUPLES_OK,
            pq.ExecStatus.EMPTY_QUERY,
        ):
            message = (result.error_message or b"").decode(errors="replace").strip()
            raise ProxyError(f"admin command {sql!r} failed: {message}")
        names = [(result.fname(i) or b"").decode() for i in range(result.nfields)]
        rows = []
        for row in range(result.ntuples):
            values = [result.get_value(row, col) for col in range(result.nfields)]
            rows.append(
                {
                    name: None if v is None else v.decode(errors="replace")
                    for name, v in zip(names, values, strict=True)
                }
            )
        return rows

    def close_unlocked(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self.close_unlocked()
