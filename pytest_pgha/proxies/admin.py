"""Talking to a proxy's admin console: PgBouncer, PgCat and PgDog only speak the
simple query protocol there, so this goes through libpq's PQexec (psycopg's pgconn)
and decodes the text result itself."""

from __future__ import annotations

import select
import threading
import time
from typing import Any, ClassVar

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo

from pytest_pgha.errors import ProxyError
from pytest_pgha.proxies.base import Proxy, ProxySettings
from pytest_pgha.sandbox.context import SandboxContext
from pytest_pgha.sandbox.process import tail_log

# A PgBouncer busy with a reconnect storm now and then closes an admin login before it
# completes (seen under `-n 4`); nothing has run yet, so logging in again is safe.
LOGIN_ATTEMPTS = 3
LOGIN_RETRY_DELAY_S = 0.05
# How long a console command may go unanswered: a proxy can accept a session and then
# never answer on it (a Pgpool-II child left behind by its failover held the sampler's
# query for minutes, and the proxy's teardown waited on it).
QUERY_TIMEOUT_S = 2.0


class AdminConsole:
    """One persistent admin connection, reopened after a failure. Thread-safe.

    Commands log in up to LOGIN_ATTEMPTS times; the sampler once, so that a dead
    proxy shows in its samples at once."""

    def __init__(
        self, dsn: str, *, login_attempts: int = 1, timeout_s: float = QUERY_TIMEOUT_S
    ) -> None:
        self.dsn = dsn
        self.login_attempts = login_attempts
        self.timeout_s = timeout_s
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def query(self, sql: str) -> list[dict[str, str | None]]:
        with self._lock:
            try:
                return self._query(sql)
            except (psycopg.Error, ProxyError):
                self.close_unlocked()
                raise

    def open(self) -> None:
        """Log in now if not logged in."""
        with self._lock:
            self._open()

    def _open(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self._login()
        return self._conn

    def _exec(self, sql: str) -> pq.abc.PGresult:
        """PQexec with a deadline: send, then wait on the socket at most timeout_s for
        the last result (libpq's own PQexec would wait for ever)."""
        pgconn = self._open().pgconn
        pgconn.send_query(sql.encode())
        deadline = time.monotonic() + self.timeout_s
        last: pq.abc.PGresult | None = None
        while True:
            while pgconn.is_busy():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ProxyError(
                        f"admin command {sql!r} got no answer within {self.timeout_s:g}s"
                    )
                readable, _, _ = select.select([pgconn.socket], [], [], remaining)
                if readable:
                    pgconn.consume_input()
            result = pgconn.get_result()
            if result is None:
                break
            last = result
        if last is None:
            raise ProxyError(f"admin command {sql!r} returned nothing")
        return last

    def _query(self, sql: str) -> list[dict[str, str | None]]:
        result = self._exec(sql)
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

    def _login(self) -> psycopg.Connection[Any]:
        for _ in range(self.login_attempts - 1):
            try:
                return psycopg.Connection.connect(self.dsn, autocommit=True)
            except psycopg.OperationalError:
                time.sleep(LOGIN_RETRY_DELAY_S)
        return psycopg.Connection.connect(self.dsn, autocommit=True)

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
    PgDog, ProxySQL): two sessions kept open from the start, one for the sampler and
    one for commands, so a command never waits behind a sample and a rewire never pays
    for a login (a proxy busy with a reconnect storm took 0.1-0.4 s per login here)."""

    admin_database: ClassVar[str]
    admin_user: ClassVar[str] = "admin"
    # PgBouncer, PgCat and PgDog serve their console on the client port.
    admin_on_listen_port: ClassVar[bool] = True

    def __init__(self, settings: ProxySettings, context: SandboxContext, binary: str) -> None:
        super().__init__(settings, context, binary)
        self.sampler_console: AdminConsole | None = None
        self.command_console: AdminConsole | None = None

    def admin_dsn(self) -> str:
        s = self.settings
        port = s.listen_port if self.admin_on_listen_port else s.admin_port
        return make_conninfo(
            host=s.listen_host,
            port=str(port),
            dbname=self.admin_database,
            user=self.admin_user,
            password=s.admin_password,
            connect_timeout=str(ADMIN_TIMEOUT_S),
        )

    def new_console(self) -> AdminConsole:
        return AdminConsole(self.admin_dsn(), login_attempts=LOGIN_ATTEMPTS)

    def after_start(self) -> None:
        self._close_consoles()  # after a crash, the old sessions are dead
        self.sampler_console = AdminConsole(self.admin_dsn())
        self.command_console = self.new_console()

    def start(self, timeout: float = 15.0) -> None:
        super().start(timeout)
        self.admin_command()  # log in now, not during the first failover

    def stop(self) -> None:
        self._close_consoles()
        super().stop()

    def _close_consoles(self) -> None:
        for console in (self.sampler_console, self.command_console):
            if console is not None:
                console.close()
        self.sampler_console = self.command_console = None

    def admin_command(
        self, *statements: str, console: AdminConsole | None = None
    ) -> list[list[dict[str, str | None]]]:
        """Run statements in order, one round trip each, in the kept command session
        (or the given one); with no statements, just make sure it is logged in."""
        if console is None:
            if self.command_console is None:
                raise ProxyError(f"{self.kind} is not started")
            console = self.command_console
        doing = "login"
        try:
            console.open()
            results = []
            for doing in statements:
                results.append(console.query(doing))
            return results
        except psycopg.Error as error:
            raise ProxyError(
                f"{self.kind} admin {doing!r} failed: {error}; its log:\n"
                f"{tail_log(self.log_path, 20)}"
            ) from error
