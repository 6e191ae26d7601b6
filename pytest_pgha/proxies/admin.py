"""Talking to a proxy's admin console: PgBouncer, PgCat and PgDog only speak the
simple query protocol there, so this goes through libpq's PQexec (psycopg's pgconn)
and decodes the text result itself."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import psycopg
from psycopg import pq

from pytest_pgha.errors import ProxyError
from pytest_pgha.proxies.base import Proxy, ProxySettings
from pytest_pgha.sandbox.context import SandboxContext


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


ADMIN_TIMEOUT_S = 2


class ConsoleProxy(Proxy):
    """A proxy administered through a PostgreSQL-protocol console (PgBouncer, PgCat,
    PgDog, ProxySQL): one kept-open session for the sampler, short-lived ones for
    commands, so a command never waits behind a sample."""

    admin_database: ClassVar[str]
    admin_user: ClassVar[str] = "admin"
    # PgBouncer, PgCat and PgDog serve their console on the client port.
    admin_on_listen_port: ClassVar[bool] = True

    def __init__(self, settings: ProxySettings, context: SandboxContext, binary: str) -> None:
        super().__init__(settings, context, binary)
        self.sampler_console: AdminConsole | None = None

    def admin_dsn(self) -> str:
        s = self.settings
        port = s.listen_port if self.admin_on_listen_port else s.admin_port
        return (
            f"host=127.0.0.1 port={port} dbname={self.admin_database} "
            f"user={self.admin_user} password={s.admin_password} "
            f"connect_timeout={ADMIN_TIMEOUT_S}"
        )

    def after_start(self) -> None:
        self.sampler_console = AdminConsole(self.admin_dsn())

    def stop(self) -> None:
        if self.sampler_console is not None:
            self.sampler_console.close()
            self.sampler_console = None
        super().stop()

    def admin_command(self, *statements: str) -> list[list[dict[str, str | None]]]:
        """Run statements in order, one round trip each, in a session of their own."""
        console = AdminConsole(self.admin_dsn())
        results = []
        try:
            for sql in statements:
                try:
                    results.append(console.query(sql))
                except psycopg.Error as error:
                    raise ProxyError(f"{self.kind} admin {sql!r} failed: {error}") from error
        finally:
            console.close()
        return results
