"""PgBouncer: a pooler with no primary detection of its own; the HA manager retargets
it (rewrite [databases], then PAUSE / RELOAD / RESUME on the admin console)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

from pytest_pgha.proxies.admin import ConsoleProxy
from pytest_pgha.proxies.base import Backend, ProxySettings
from pytest_pgha.proxies.confsyntax import require_backend
from pytest_pgha.proxies.samples import ProxySample
from pytest_pgha.sandbox.context import SandboxContext
from pytest_pgha.timeline import now_epoch_us

ADMIN_USER = "pgha_admin"
# Failover-friendly defaults; each can be overridden through ProxySettings.options.
DEFAULTS = {
    "pool_mode": "transaction",
    # 15 s by default: new clients would fail for that long after the backend died,
    # which would dominate the measured window. 0 retries at once.
    "server_login_retry": "0",
    "server_connect_timeout": "3",
    "query_wait_timeout": "30",
    "default_pool_size": "20",
    "max_client_conn": "500",
}
PAUSE_TIMEOUT_S = 0.5


class PgBouncerProxy(ConsoleProxy):
    kind: ClassVar[str] = "pgbouncer"
    program: ClassVar[str] = "pgbouncer"
    install_hint: ClassVar[str] = "apt-get install pgbouncer"
    admin_database: ClassVar[str] = "pgbouncer"
    admin_user: ClassVar[str] = ADMIN_USER

    def __init__(self, settings: ProxySettings, context: SandboxContext, binary: str) -> None:
        super().__init__(settings, context, binary)
        self._writer: Backend = self.settings.primary

    def render(self) -> dict[str, str]:
        return {"pgbouncer.ini": self._ini(self._writer), "userlist.txt": self._userlist()}

    def _ini(self, writer: Backend) -> str:
        s = self.settings
        options = {**DEFAULTS, **s.options}
        lines = [
            "[databases]",
            f"{s.database} = host={writer.host} port={writer.port} dbname={s.database}",
        ]
        lines += [
            "",
            "[pgbouncer]",
            f"listen_addr = {s.listen_host}",
            f"listen_port = {s.listen_port}",
            # No unix socket: nothing but loopback TCP, and no path-length limits.
            "unix_socket_dir =",
            "auth_type = scram-sha-256",
            f"auth_file = {s.workdir / 'userlist.txt'}",
            f"admin_users = {ADMIN_USER}",
            f"stats_users = {ADMIN_USER}",
            "ignore_startup_parameters = extra_float_digits",
            "log_connections = 0",
            "log_disconnections = 0",
            "logfile =",
        ]
        lines += [f"{key} = {value}" for key, value in options.items()]
        return "\n".join(lines) + "\n"

    def _userlist(self) -> str:
        s = self.settings
        # Plain-text passwords: PgBouncer then does SCRAM both with clients and servers.
        users = {s.app_user: s.app_password, ADMIN_USER: s.admin_password}
        return "".join(f'"{user}" "{password}"\n' for user, password in users.items())

    def argv(self) -> list[str]:
        return [self.binary, str(self.settings.workdir / "pgbouncer.ini")]

    def rewire(self, new_primary: str) -> None:
        """Rewrite [databases] and switch atomically: clients queue while paused. A
        PAUSE that cannot finish (a frozen old primary holds server connections) falls
        back to KILL, which drops them and leaves the database paused."""
        self._writer = require_backend(self.settings, new_primary)
        (self.settings.workdir / "pgbouncer.ini").write_text(self._ini(self._writer))
        db = self.settings.database
        if not _run_with_timeout(lambda: self.admin_command(f"PAUSE {db}"), PAUSE_TIMEOUT_S):
            # The PAUSE finishes by itself once KILL released the servers.
            killing = self.new_console()
            try:
                self.admin_command(f"KILL {db}", console=killing)
            finally:
                killing.close()
        self.admin_command("RELOAD", f"RESUME {db}")

    def sample(self) -> ProxySample:
        if self.sampler_console is None:
            return self.failed_sample()
        rows = self.sampler_console.query("SHOW POOLS")
        pool = next(
            (
                r
                for r in rows
                if r.get("database") == self.settings.database
                and r.get("user") == self.settings.app_user
            ),
            None,
        )
        if pool is None:
            return ProxySample(now_epoch_us(), self._writer.address, 0, 0)
        servers = sum(int(pool.get(k) or 0) for k in ("sv_active", "sv_idle", "sv_used"))
        return ProxySample(
            now_epoch_us(),
            self._writer.address,
            1 if servers else 0,
            int(pool.get("sv_active") or 0),
        )


def _run_with_timeout(call: Callable[[], Any], timeout: float) -> bool:
    """Run call() in a thread; True if it finished in time (its errors propagate)."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as error:  # re-raised in the caller's thread
            outcome.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        return False
    if outcome[0] is not None:
        raise outcome[0]
    return True
