"""ProxySQL 3.x for PostgreSQL: writer hostgroup 10 (the primary), reader hostgroup 20
(the replicas), configured from proxysql.cnf at start and through admin SQL on the
PostgreSQL-protocol admin port afterwards.

Explicit path: the admin SQL of the failover lab ("ProxySQL for PostgreSQL - Surviving an
unplanned primary failure").
Monitor path: pgsql_replication_hostgroups (10, 20, 'read_only'), where the monitor's
pg_is_in_recovery() probe moves servers between the two hostgroups by itself.

The config file is libconfig, read by lib/ProxySQL_Config.cpp (sysown/proxysql v3.0):
`<prefix>_variables` groups become `<prefix>-<name>` global variables, and the
pgsql_servers / pgsql_users / pgsql_replication_hostgroups / pgsql_query_rules lists
become rows of the admin tables of the same name.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import psycopg

from pytest_pgha.errors import ProxyError
from pytest_pgha.proxies.admin import ConsoleProxy
from pytest_pgha.proxies.base import Backend
from pytest_pgha.proxies.confsyntax import quoted, require_backend, scalar
from pytest_pgha.proxies.samples import WRITER_DOWN, WRITER_UP, ProxySample
from pytest_pgha.timeline import now_epoch_us

CONFIG_FILE = "proxysql.cnf"
DATA_DIR = "data"
WRITER_HG = 10
READER_HG = 20
ADMIN_USER = "admin"
ADMIN_DATABASE = "admin"  # docs: getting-started, `psql -U admin -p6132 -d admin`
READ_RULE_ID = 1

# pgsql_variables (docs: global-variables/pgsql-monitor-variables, whose defaults these
# are, written out so a report says what was in force). Override through
# settings.options, with or without the "pgsql-" prefix; "admin-" keys go to
# admin_variables.
PGSQL_DEFAULTS: dict[str, str] = {
    "monitor_read_only_interval": "1000",
    "monitor_read_only_timeout": "800",
    "monitor_read_only_max_timeout_count": "3",
    "monitor_ping_interval": "8000",
    "monitor_writer_is_also_reader": "true",
    "connect_timeout_server": "1000",
    "connect_retries_on_failure": "10",
}

# SELECT as the lab's harness samples the writer hostgroup. ONLINE rows first: after a
# rewire the old writer can linger in the stats as OFFLINE_HARD until its connections
# are gone.
SAMPLE_SQL = (
    # Aliases: the names of the result's columns do not depend on ProxySQL's casing.
    "SELECT srv_host AS host, srv_port AS port, status, ConnUsed AS conn_used "
    "FROM stats_pgsql_connection_pool "
    f"WHERE hostgroup = {WRITER_HG} "
    "ORDER BY CASE WHEN status = 'ONLINE' THEN 0 ELSE 1 END LIMIT 1"
)


class ProxySQLProxy(ConsoleProxy):
    kind: ClassVar[str] = "proxysql"
    program: ClassVar[str] = "proxysql"
    install_hint: ClassVar[str] = (
        "ProxySQL 3.x is not packaged in Debian: install the upstream .deb from "
        "https://github.com/sysown/proxysql/releases (dpkg -i proxysql_3.*_amd64.deb) "
        "or build it from source (its tree bundles dependency tarballs a plain clone "
        "may lack)"
    )
    has_monitor: ClassVar[bool] = True
    splits_reads: ClassVar[bool] = True
    admin_database: ClassVar[str] = ADMIN_DATABASE
    admin_user: ClassVar[str] = ADMIN_USER
    admin_on_listen_port: ClassVar[bool] = False  # its own PostgreSQL-protocol admin port

    @property
    def data_dir(self) -> Path:
        return self.settings.workdir / DATA_DIR

    # -- configuration -------------------------------------------------------------------
    def _variables(self) -> tuple[dict[str, str], dict[str, str]]:
        pgsql, admin = dict(PGSQL_DEFAULTS), {}
        for key, value in self.settings.options.items():
            if key.startswith("admin-"):
                admin[key.removeprefix("admin-")] = value
            else:
                pgsql[key.removeprefix("pgsql-")] = value
        return pgsql, admin

    def render(self) -> dict[str, str]:
        pgsql, admin = self._variables()
        sections = [
            f"datadir={quoted(str(self.data_dir))}",
            self._admin_variables(admin),
            # ProxySQL 3 also runs its MySQL side, whose listener would default to
            # 0.0.0.0:6033 and clash between parallel runs. A relative unix socket
            # lands in the cwd, which is the workdir (with -f, ProxySQL skips its chdir
            # to the datadir), and stays far below sun_path's 107 bytes.
            _group("mysql_variables", [f"interfaces={quoted('mysql.sock')}"]),
            _group("pgsql_variables", self._pgsql_variables(pgsql)),
            _list("pgsql_servers", [self._server(b) for b in self._ordered_backends()]),
            _list("pgsql_users", [self._user()]),
        ]
        if self.settings.monitor:
            sections.append(_list("pgsql_replication_hostgroups", [_replication_hostgroup()]))
        if self._read_port() is not None:
            sections.append(_list("pgsql_query_rules", [self._read_rule()]))
        return {CONFIG_FILE: "\n\n".join(sections) + "\n"}

    def _admin_variables(self, overrides: dict[str, str]) -> str:
        s = self.settings
        lines = [
            f"admin_credentials={quoted(f'{ADMIN_USER}:{s.admin_password}')}",
            f"pgsql_ifaces={quoted(f'{s.listen_host}:{s.admin_port}')}",
            # The MySQL-protocol admin (default 0.0.0.0:6032): a socket, as above.
            f"mysql_ifaces={quoted('mysql_admin.sock')}",
            *(f"{key}={scalar(value)}" for key, value in overrides.items()),
        ]
        return _group("admin_variables", lines)

    def _pgsql_variables(self, values: dict[str, str]) -> list[str]:
        s = self.settings
        interfaces = f"{s.listen_host}:{s.listen_port}"
        if self._read_port() is not None:
            interfaces += f";{s.listen_host}:{self._read_port()}"
        return [
            f"interfaces={quoted(interfaces)}",
            f"monitor_username={quoted(s.monitor_user)}",
            f"monitor_password={quoted(s.monitor_password)}",
            *(f"{key}={scalar(value)}" for key, value in values.items()),
        ]

    def _ordered_backends(self) -> tuple[Backend, ...]:
        return (self.settings.primary, *self.settings.replicas)

    @staticmethod
    def _server(backend: Backend) -> str:
        hostgroup = WRITER_HG if backend.role == "primary" else READER_HG
        return _row(
            [
                f"address={quoted(backend.host)}",
                f"port={backend.port}",
                f"hostgroup_id={hostgroup}",
                f"comment={quoted(backend.name)}",
            ]
        )

    def _user(self) -> str:
        s = self.settings
        return _row(
            [
                f"username={quoted(s.app_user)}",
                f"password={quoted(s.app_password)}",
                f"default_hostgroup={WRITER_HG}",
            ]
        )

    def _read_port(self) -> int | None:
        return self.settings.read_port if self.settings.replicas else None

    def _read_rule(self) -> str:
        # Everything arriving on the read port goes to the readers, like PgBouncer's
        # `_ro` database. A `^SELECT` digest rule would send a write on the "read-only"
        # port to the primary instead of failing it.
        return _row(
            [
                f"rule_id={READ_RULE_ID}",
                "active=1",
                f"proxy_port={self._read_port()}",
                f"destination_hostgroup={READER_HG}",
                "apply=1",
            ]
        )

    def argv(self) -> list[str]:
        # -f: foreground, no angel process to restart a killed child. --initial: this
        # file, not a proxysql.db left by an earlier start, is the configuration.
        return [
            self.binary,
            "-f",
            "--initial",
            "--no-version-check",
            "-c",
            str(self.settings.workdir / CONFIG_FILE),
            "-D",
            str(self.data_dir),
        ]

    def write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        super().write_config()  # also hands the data dir to the service user

    @property
    def ro_dsn(self) -> str | None:
        port = self._read_port()
        return None if port is None else self.dsn(port)

    # -- failover ------------------------------------------------------------------------
    def rewire_statements(self, new_primary: str) -> list[str]:
        """The lab's promote.sh: drop the old primary, make the new one the writer,
        load to runtime. The lab's UPDATE becomes DELETE + INSERT so that the result is
        the same wherever the monitor may already have put the new primary (an UPDATE
        to hostgroup 10 would hit the primary key if it were in both hostgroups)."""
        old = self.settings.primary
        new = require_backend(self.settings, new_primary)
        return [
            f"DELETE FROM pgsql_servers WHERE {_where(old)}",
            f"DELETE FROM pgsql_servers WHERE {_where(new)}",
            "INSERT INTO pgsql_servers (hostgroup_id, hostname, port, comment) VALUES "
            f"({WRITER_HG}, {_literal(new.host)}, {new.port}, {_literal(new.name)})",
            "LOAD PGSQL SERVERS TO RUNTIME",
        ]

    def rewire(self, new_primary: str) -> None:
        # One statement per round trip, as psql -f sends them.
        self.admin_command(*self.rewire_statements(new_primary))
        # What the runtime now holds: the old primary is gone, as in the lab. A
        # restart (start() renders the file again) comes back to the same topology.
        old = self.settings.primary.name
        settings = self.settings.with_primary(new_primary)
        self.settings = settings if old == new_primary else settings.without(old)

    def sample(self) -> ProxySample:
        if self.sampler_console is None:
            return self.failed_sample()
        try:
            rows = self.sampler_console.query(SAMPLE_SQL)
        except (psycopg.Error, ProxyError):
            return self.failed_sample()
        if not rows:  # an empty writer hostgroup: nowhere to send writes
            return ProxySample(now_epoch_us(), None, WRITER_DOWN, 0)
        row = rows[0]
        state = WRITER_UP if row.get("status") == "ONLINE" else WRITER_DOWN
        return ProxySample(
            now_epoch_us(),
            f"{row.get('host')}:{row.get('port')}",
            state,
            int(row.get("conn_used") or 0),
        )


def _replication_hostgroup() -> str:
    # check_type: 'read_only' is the one type PostgreSQL has (pg_is_in_recovery()).
    fields = [
        f"writer_hostgroup={WRITER_HG}",
        f"reader_hostgroup={READER_HG}",
        f"check_type={quoted('read_only')}",
        f"comment={quoted('pgha')}",
    ]
    return _row(fields)


def _group(name: str, lines: list[str]) -> str:
    body = "\n".join(f"    {line}" for line in lines)
    return f"{name}=\n{{\n{body}\n}}"


def _row(fields: list[str]) -> str:
    return "{ " + " ".join(fields) + " }"


def _list(name: str, rows: list[str]) -> str:
    body = ",\n".join(f"    {row}" for row in rows)
    return f"{name}=\n(\n{body}\n)"


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _where(backend: Backend) -> str:
    return f"hostname = {_literal(backend.host)} AND port = {backend.port}"
