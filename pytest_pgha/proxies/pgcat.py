"""PgCat: a pooler with static roles. It never works out which server is the primary
(and never bans one), so failover is explicit: rewrite pgcat.toml with the new roles
and `RELOAD` on the admin console.

Every key below is checked against postgresml/pgcat's CONFIG.md, its example pgcat.toml
and src/config.rs; where the code and the docs disagree, the code wins and the key is
set explicitly.
"""

from __future__ import annotations

from typing import ClassVar

import psycopg

from pytest_pgha.errors import ProxyError
from pytest_pgha.proxies.admin import ConsoleProxy
from pytest_pgha.proxies.base import Backend
from pytest_pgha.proxies.confsyntax import key_values, quoted, require_backend, table_key
from pytest_pgha.proxies.samples import WRITER_DOWN, WRITER_UP, ProxySample
from pytest_pgha.timeline import now_epoch_us

CONFIG_FILE = "pgcat.toml"
# The virtual admin database: src/client.rs accepts "pgcat" or "pgbouncer".
ADMIN_DATABASE = "pgcat"
ADMIN_USER = "admin"

# [general], tuned for failover tests; each can be overridden through settings.options.
GENERAL_DEFAULTS: dict[str, str] = {
    # ms a client waits for a server connection (code default 1000; the example uses
    # 5000). A client that asked while no primary answered waits all of it before the
    # error that makes it reconnect to the new pool: with 1000, writes resumed ~1 s
    # after the rewire; with 300, 100-400 ms.
    "connect_timeout": "300",
    "healthcheck_timeout": "500",
    # Re-check a pooled connection idle for more than this (ms) before handing it out
    # (default 30000): a dead primary shows on the first checkout, not 30 s later.
    "healthcheck_delay": "100",
    # Seconds a failed *replica* stays banned (PgCat never bans the primary).
    "ban_time": "10",
}
# [pools.<db>]. The code defaults (src/config.rs: Pool) differ from CONFIG.md (docs:
# default_role "any", query parser and primary reads enabled; code: parser and primary
# reads disabled), so all five are always written out.
POOL_DEFAULTS: dict[str, str] = {
    "pool_mode": "transaction",
    # Every query to the primary: the adapter measures the write path, not read routing.
    "default_role": "primary",
    "query_parser_enabled": "false",
    "query_parser_read_write_splitting": "false",
    "primary_reads_enabled": "true",
}
USER_DEFAULTS: dict[str, str] = {"pool_size": "20"}


class PgCatProxy(ConsoleProxy):
    kind: ClassVar[str] = "pgcat"
    program: ClassVar[str] = "pgcat"
    install_hint: ClassVar[str] = (
        "PgCat is neither on crates.io nor in Debian: build github.com/postgresml/pgcat "
        "with `cargo build --release` and put target/release/pgcat on PATH "
        "(e.g. install -m 755 target/release/pgcat /usr/local/bin/pgcat)"
    )
    has_monitor: ClassVar[bool] = False
    splits_reads: ClassVar[bool] = False
    admin_database: ClassVar[str] = ADMIN_DATABASE
    admin_user: ClassVar[str] = ADMIN_USER

    # -- configuration -------------------------------------------------------------------
    def _split_options(self) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        general, pool, user = dict(GENERAL_DEFAULTS), dict(POOL_DEFAULTS), dict(USER_DEFAULTS)
        for key, value in self.settings.options.items():
            target = pool if key in POOL_DEFAULTS else user if key in USER_DEFAULTS else general
            target[key] = value
        return general, pool, user

    def render(self) -> dict[str, str]:
        s = self.settings
        general, pool, user = self._split_options()
        prefix = f"pools.{table_key(s.database)}"
        lines = [
            "[general]",
            f"host = {quoted(s.listen_host)}",
            f"port = {s.listen_port}",
            f"admin_username = {quoted(ADMIN_USER)}",
            f"admin_password = {quoted(s.admin_password)}",
            # CONFIG.md says the exporter defaults to on (port 9930), the code to off:
            # written out so parallel runs never fight over 9930. `autoreload` stays
            # unset (code default: off; CONFIG.md: 15000 ms), so only our RELOAD makes
            # PgCat read the file, never a half-written one.
            "enable_prometheus_exporter = false",
            *key_values(general),
            "",
            f"[{prefix}]",
            *key_values(pool),
            "",
            f"[{prefix}.users.0]",
            f"username = {quoted(s.app_user)}",
            f"password = {quoted(s.app_password)}",
            *key_values(user),
            "",
            f"[{prefix}.shards.0]",
            "servers = [",
            *(f"  {_server(b)}," for b in self._ordered_backends()),
            "]",
            f"database = {quoted(s.database)}",
        ]
        return {CONFIG_FILE: "\n".join(lines) + "\n"}

    def _ordered_backends(self) -> tuple[Backend, ...]:
        # Primary first, as in PgCat's examples; it also keeps replica numbering stable.
        return (self.settings.primary, *self.settings.replicas)

    def argv(self) -> list[str]:
        # The config path is PgCat's one positional argument (src/cmd_args.rs).
        return [self.binary, str(self.settings.workdir / CONFIG_FILE), "--no-color"]

    # -- failover ------------------------------------------------------------------------
    def rewire(self, new_primary: str) -> None:
        """Rewrite the roles and RELOAD: PgCat builds new pools from the file before it
        answers, so writes go to new_primary once this returns."""
        require_backend(self.settings, new_primary)
        self.settings = self.settings.with_primary(new_primary)
        self.write_config()
        self.admin_command("RELOAD")

    def sample(self) -> ProxySample:
        """The primary's address and ban flag from SHOW DATABASES (PgCat never bans a
        primary, so it stays 1 while the server is dead: PgCat does not know) and its busy
        server connections from SHOW SERVERS (state per src/stats/server.rs)."""
        if self.sampler_console is None:
            return self.failed_sample()
        try:
            databases = self.sampler_console.query("SHOW DATABASES")
            servers = self.sampler_console.query("SHOW SERVERS")
        except (psycopg.Error, ProxyError):
            return self.failed_sample()
        name = f"{self.settings.database}_shard_0_primary"  # config.rs Address::name()
        row = next((r for r in databases if r.get("name") == name), None)
        if row is None:
            return ProxySample(now_epoch_us(), None, WRITER_DOWN, 0)
        active = sum(
            1 for r in servers if r.get("address_id") == name and r.get("state") == "active"
        )
        state = WRITER_DOWN if row.get("disabled") == "1" else WRITER_UP
        return ProxySample(now_epoch_us(), f"{row.get('host')}:{row.get('port')}", state, active)


def _server(backend: Backend) -> str:
    return f"[{quoted(backend.host)}, {backend.port}, {quoted(backend.role)}]"
