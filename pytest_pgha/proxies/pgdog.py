"""PgDog: a pooler and load balancer. Explicit path: static roles rewritten into
pgdog.toml and `RELOAD` on the admin database. Monitor path: every database gets
`role = "auto"` and PgDog routes writes to whichever server says
`pg_is_in_recovery() = false` (docs: features/load-balancer/replication-failover).

Keys follow docs.pgdog.dev (configuration/pgdog.toml/{general,databases,admin},
users.toml/users) and pgdog-config/src, which rejects unknown keys (deny_unknown_fields).
"""

from __future__ import annotations

from typing import ClassVar

import psycopg

from pytest_pgha.errors import ProxyError
from pytest_pgha.proxies.admin import ConsoleProxy
from pytest_pgha.proxies.base import Backend
from pytest_pgha.proxies.confsyntax import key_values, quoted, require_backend
from pytest_pgha.proxies.samples import WRITER_DOWN, WRITER_UP, ProxySample
from pytest_pgha.timeline import now_epoch_us

CONFIG_FILE = "pgdog.toml"
USERS_FILE = "users.toml"
ADMIN_DATABASE = "admin"  # [admin] name; the default, written out for clarity
ADMIN_USER = "admin"

# [general], tuned for failover tests (defaults in ms: healthchecks 30000, ban 300000,
# connect 5000); each can be overridden through settings.options.
GENERAL_DEFAULTS: dict[str, str] = {
    "healthcheck_interval": "1000",
    "idle_healthcheck_interval": "1000",
    "healthcheck_timeout": "1000",
    "ban_timeout": "5000",
    "connect_timeout": "1000",
}
# read_write_split keeps its default (include_primary): a standalone SELECT may go to a
# replica, transactions go to the primary. "prefer_primary" would pin everything to the
# primary but is recent (2026) and older builds reject it; pass it through options.
# Only with settings.monitor: the LSN check is what notices a promotion, and it is off
# by default (lsn_check_delay = infinity). Docs call the query cheap enough to run often.
MONITOR_DEFAULTS: dict[str, str] = {
    "lsn_check_delay": "0",
    "lsn_check_interval": "100",
}


class PgDogProxy(ConsoleProxy):
    kind: ClassVar[str] = "pgdog"
    program: ClassVar[str] = "pgdog"
    install_hint: ClassVar[str] = (
        "PgDog is neither on crates.io nor in Debian: build github.com/pgdogdev/pgdog "
        "from source (`cargo build --release`) on a machine that reaches its git "
        "dependencies, and put target/release/pgdog on PATH"
    )
    has_monitor: ClassVar[bool] = True
    splits_reads: ClassVar[bool] = False
    admin_database: ClassVar[str] = ADMIN_DATABASE
    admin_user: ClassVar[str] = ADMIN_USER

    # -- configuration -------------------------------------------------------------------
    def _general(self) -> dict[str, str]:
        general = dict(GENERAL_DEFAULTS)
        if self.settings.monitor:
            general.update(MONITOR_DEFAULTS)
        general.update(self.settings.options)
        return general

    def render(self) -> dict[str, str]:
        return {CONFIG_FILE: self._pgdog_toml(), USERS_FILE: self._users_toml()}

    def _pgdog_toml(self) -> str:
        s = self.settings
        lines = [
            "[general]",
            f"host = {quoted(s.listen_host)}",
            f"port = {s.listen_port}",
            *key_values(self._general()),
            "",
            # The admin database lives on the client port; settings.admin_port is unused.
            "[admin]",
            f"name = {quoted(ADMIN_DATABASE)}",
            f"user = {quoted(ADMIN_USER)}",
            f"password = {quoted(s.admin_password)}",
        ]
        for backend in (s.primary, *s.replicas):
            lines += ["", *self._database(backend)]
        return "\n".join(lines) + "\n"

    def _database(self, backend: Backend) -> list[str]:
        s = self.settings
        # The docs: failover needs *every* database on "auto", not just the replicas.
        role = "auto" if s.monitor else backend.role
        return [
            "[[databases]]",
            f"name = {quoted(s.database)}",
            f"host = {quoted(backend.host)}",
            f"port = {backend.port}",
            f"database_name = {quoted(s.database)}",
            f"role = {quoted(role)}",
        ]

    def _users_toml(self) -> str:
        s = self.settings
        return (
            "\n".join(
                [
                    "[[users]]",
                    f"name = {quoted(s.app_user)}",
                    f"database = {quoted(s.database)}",
                    f"password = {quoted(s.app_password)}",
                ]
            )
            + "\n"
        )

    def argv(self) -> list[str]:
        workdir = self.settings.workdir
        return [
            self.binary,
            "--config",
            str(workdir / CONFIG_FILE),
            "--users",
            str(workdir / USERS_FILE),
        ]

    # -- failover ------------------------------------------------------------------------
    def rewire(self, new_primary: str) -> None:
        """Rewrite the roles and RELOAD (docs: administration, "reload configuration
        from disk"). Under settings.monitor every role stays "auto", so the file does not
        change: routing follows PgDog's own LSN check, not this call."""
        require_backend(self.settings, new_primary)
        self.settings = self.settings.with_primary(new_primary)
        self.write_config()
        self.admin_command("RELOAD")

    def sample(self) -> ProxySample:
        """The primary's pool from SHOW POOLS (columns per docs administration/pools):
        addr:port, up unless banned or offline, sv_active busy server connections."""
        if self.sampler_console is None:
            return self.failed_sample()
        try:
            pools = self.sampler_console.query("SHOW POOLS")
        except (psycopg.Error, ProxyError):
            return self.failed_sample()
        s = self.settings
        row = next(
            (
                r
                for r in pools
                if r.get("database") == s.database
                and r.get("user") == s.app_user
                and r.get("role") == "primary"
            ),
            None,
        )
        if row is None:
            return ProxySample(now_epoch_us(), None, WRITER_DOWN, 0)
        up = _true(row.get("online")) and not _true(row.get("banned"))
        return ProxySample(
            now_epoch_us(),
            f"{row.get('addr')}:{row.get('port')}",
            WRITER_UP if up else WRITER_DOWN,
            int(row.get("sv_active") or 0),
        )


def _true(value: str | None) -> bool:
    return (value or "").lower() in ("t", "true", "1")
