"""Configuration rendering of the ProxySQL, PgDog and PgCat adapters: pure, no binary,
no database. The rewire tests stub the admin call and look at the files on disk."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10, which pyproject still allows
    tomllib = pytest.importorskip("tomli")

from pytest_pgha.errors import ProxyError
from pytest_pgha.proxies.base import Backend, Proxy, ProxySettings
from pytest_pgha.proxies.pgcat import PgCatProxy
from pytest_pgha.proxies.pgdog import PgDogProxy
from pytest_pgha.proxies.proxysql import ProxySQLProxy


def make_settings(workdir: Path, **overrides: Any) -> ProxySettings:
    values: dict[str, Any] = {
        "workdir": workdir,
        "listen_port": 21000,
        "admin_port": 21001,
        "backends": (
            Backend("node0", "127.0.0.1", 5433, "primary"),
            Backend("node1", "127.0.0.1", 5434, "replica"),
            Backend("node2", "127.0.0.1", 5435, "replica"),
        ),
        "app_password": "app-secret",
        "monitor_password": "monitor-secret",
        "admin_password": "admin-secret",
    }
    values.update(overrides)
    return ProxySettings(**values)


class NoOwner:
    def own(self, path: Path) -> None:
        return None


STUB_CONTEXT: Any = SimpleNamespace(identity=NoOwner())


def make(cls: type[Proxy], settings: ProxySettings) -> Any:
    return cls(settings, STUB_CONTEXT, f"/opt/bin/{cls.program}")


def record_admin(monkeypatch: pytest.MonkeyPatch, proxy: Any) -> list[str]:
    sent: list[str] = []
    monkeypatch.setattr(proxy, "admin_command", lambda *sql: sent.extend(sql))
    return sent


# -- PgCat -----------------------------------------------------------------------------


def pgcat_toml(proxy: Any) -> dict[str, Any]:
    return tomllib.loads(proxy.render()["pgcat.toml"])


def test_pgcat_class_attributes() -> None:
    assert (PgCatProxy.kind, PgCatProxy.program) == ("pgcat", "pgcat")
    assert PgCatProxy.has_monitor is False
    assert PgCatProxy.splits_reads is False
    assert "cargo build --release" in PgCatProxy.install_hint


def test_pgcat_general(tmp_path: Path) -> None:
    general = pgcat_toml(make(PgCatProxy, make_settings(tmp_path)))["general"]
    assert general == {
        "host": "127.0.0.1",
        "port": 21000,
        "admin_username": "admin",
        "admin_password": "admin-secret",
        "enable_prometheus_exporter": False,
        "connect_timeout": 300,
        "healthcheck_timeout": 500,
        "healthcheck_delay": 100,
        "ban_time": 10,
    }


def test_pgcat_pool_keys_are_explicit(tmp_path: Path) -> None:
    pool = pgcat_toml(make(PgCatProxy, make_settings(tmp_path)))["pools"]["app"]
    assert pool["pool_mode"] == "transaction"
    assert pool["default_role"] == "primary"
    assert pool["query_parser_enabled"] is False
    assert pool["query_parser_read_write_splitting"] is False
    assert pool["primary_reads_enabled"] is True
    assert pool["users"] == {"0": {"username": "app", "password": "app-secret", "pool_size": 20}}
    assert pool["shards"] == {
        "0": {
            "database": "app",
            "servers": [
                ["127.0.0.1", 5433, "primary"],
                ["127.0.0.1", 5434, "replica"],
                ["127.0.0.1", 5435, "replica"],
            ],
        }
    }


def test_pgcat_options_land_in_their_sections(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        options={"ban_time": "0", "pool_size": "5", "default_role": "any", "server_tls": "false"},
    )
    config = pgcat_toml(make(PgCatProxy, settings))
    assert config["general"]["ban_time"] == 0
    assert config["general"]["server_tls"] is False
    assert config["pools"]["app"]["default_role"] == "any"
    assert config["pools"]["app"]["users"]["0"]["pool_size"] == 5


def test_pgcat_after_failover_node1_is_primary(tmp_path: Path) -> None:
    settings = make_settings(tmp_path).with_primary("node1")
    servers = pgcat_toml(make(PgCatProxy, settings))["pools"]["app"]["shards"]["0"]["servers"]
    assert servers == [
        ["127.0.0.1", 5434, "primary"],
        ["127.0.0.1", 5433, "replica"],
        ["127.0.0.1", 5435, "replica"],
    ]


def test_pgcat_argv(tmp_path: Path) -> None:
    proxy = make(PgCatProxy, make_settings(tmp_path))
    assert proxy.argv() == ["/opt/bin/pgcat", str(tmp_path / "pgcat.toml"), "--no-color"]
    assert proxy.ro_dsn is None
    assert "port=21000" in proxy.rw_dsn and "dbname=app" in proxy.rw_dsn


def test_pgcat_rewire_rewrites_and_reloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = make(PgCatProxy, make_settings(tmp_path))
    sent = record_admin(monkeypatch, proxy)
    proxy.rewire("node2")
    assert sent == ["RELOAD"]
    written = tomllib.loads((tmp_path / "pgcat.toml").read_text())
    servers = written["pools"]["app"]["shards"]["0"]["servers"]
    assert servers[0] == ["127.0.0.1", 5435, "primary"]
    assert [s[2] for s in servers].count("primary") == 1
    assert proxy.settings.primary.name == "node2"


def test_pgcat_sample_without_admin_is_a_failed_probe(tmp_path: Path) -> None:
    sample = make(PgCatProxy, make_settings(tmp_path)).sample()
    assert (sample.writer, sample.writer_state) == (None, -1)


# -- PgDog -----------------------------------------------------------------------------


def pgdog_files(proxy: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    files = proxy.render()
    assert set(files) == {"pgdog.toml", "users.toml"}
    return tomllib.loads(files["pgdog.toml"]), tomllib.loads(files["users.toml"])


def test_pgdog_class_attributes() -> None:
    assert (PgDogProxy.kind, PgDogProxy.program) == ("pgdog", "pgdog")
    assert PgDogProxy.has_monitor is True
    assert "crates.io" in PgDogProxy.install_hint


def test_pgdog_static_roles(tmp_path: Path) -> None:
    config, users = pgdog_files(make(PgDogProxy, make_settings(tmp_path)))
    assert config["general"] == {
        "host": "127.0.0.1",
        "port": 21000,
        "healthcheck_interval": 1000,
        "idle_healthcheck_interval": 1000,
        "healthcheck_timeout": 1000,
        "ban_timeout": 5000,
        "connect_timeout": 1000,
    }
    assert config["admin"] == {"name": "admin", "user": "admin", "password": "admin-secret"}
    assert config["databases"] == [
        {
            "name": "app",
            "host": "127.0.0.1",
            "port": 5433,
            "database_name": "app",
            "role": "primary",
        },
        {
            "name": "app",
            "host": "127.0.0.1",
            "port": 5434,
            "database_name": "app",
            "role": "replica",
        },
        {
            "name": "app",
            "host": "127.0.0.1",
            "port": 5435,
            "database_name": "app",
            "role": "replica",
        },
    ]
    assert users == {"users": [{"name": "app", "database": "app", "password": "app-secret"}]}


def test_pgdog_monitor_makes_every_role_auto(tmp_path: Path) -> None:
    config, _ = pgdog_files(make(PgDogProxy, make_settings(tmp_path, monitor=True)))
    assert [db["role"] for db in config["databases"]] == ["auto", "auto", "auto"]
    assert config["general"]["lsn_check_delay"] == 0
    assert config["general"]["lsn_check_interval"] == 100


def test_pgdog_options_override_general(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        monitor=True,
        options={"lsn_check_interval": "250", "read_write_split": "prefer_primary"},
    )
    general = pgdog_files(make(PgDogProxy, settings))[0]["general"]
    assert general["lsn_check_interval"] == 250
    assert general["read_write_split"] == "prefer_primary"


def test_pgdog_after_failover_node1_is_primary(tmp_path: Path) -> None:
    settings = make_settings(tmp_path).with_primary("node1")
    config, _ = pgdog_files(make(PgDogProxy, settings))
    roles = {db["port"]: db["role"] for db in config["databases"]}
    assert roles == {5434: "primary", 5433: "replica", 5435: "replica"}


def test_pgdog_argv(tmp_path: Path) -> None:
    proxy = make(PgDogProxy, make_settings(tmp_path))
    assert proxy.argv() == [
        "/opt/bin/pgdog",
        "--config",
        str(tmp_path / "pgdog.toml"),
        "--users",
        str(tmp_path / "users.toml"),
    ]


def test_pgdog_rewire_rewrites_and_reloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = make(PgDogProxy, make_settings(tmp_path))
    sent = record_admin(monkeypatch, proxy)
    proxy.rewire("node1")
    assert sent == ["RELOAD"]
    written = tomllib.loads((tmp_path / "pgdog.toml").read_text())
    first = written["databases"][0]
    assert (first["port"], first["role"]) == (5434, "primary")
    assert (tmp_path / "users.toml").exists()


# -- ProxySQL --------------------------------------------------------------------------


def cnf(proxy: Any) -> str:
    files = proxy.render()
    assert set(files) == {"proxysql.cnf"}
    return str(files["proxysql.cnf"])


def rows(text: str, table: str) -> list[str]:
    """The `{ ... }` rows of one libconfig list, e.g. pgsql_servers=( {..}, {..} )."""
    match = re.search(rf"^{table}=\n\((.*?)\n\)", text, re.S | re.M)
    assert match, f"no {table} list in:\n{text}"
    return re.findall(r"\{[^}]*\}", match.group(1))


def group(text: str, name: str) -> str:
    match = re.search(rf"^{name}=\n\{{(.*?)\n\}}", text, re.S | re.M)
    assert match, f"no {name} group in:\n{text}"
    return match.group(1)


def test_proxysql_class_attributes() -> None:
    assert (ProxySQLProxy.kind, ProxySQLProxy.program) == ("proxysql", "proxysql")
    assert ProxySQLProxy.has_monitor is True
    assert "releases" in ProxySQLProxy.install_hint


def test_proxysql_admin_and_listeners(tmp_path: Path) -> None:
    text = cnf(make(ProxySQLProxy, make_settings(tmp_path)))
    assert f'datadir="{tmp_path / "data"}"' in text
    admin = group(text, "admin_variables")
    assert 'admin_credentials="admin:admin-secret"' in admin
    assert 'pgsql_ifaces="127.0.0.1:21001"' in admin
    # No TCP listener on ProxySQL's default MySQL ports (6032/6033).
    assert 'mysql_ifaces="mysql_admin.sock"' in admin
    assert 'interfaces="mysql.sock"' in group(text, "mysql_variables")


def test_proxysql_pgsql_variables(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        options={"pgsql-monitor_read_only_interval": "200", "admin-refresh_interval": "500"},
    )
    text = cnf(make(ProxySQLProxy, settings))
    pgsql = group(text, "pgsql_variables")
    assert 'interfaces="127.0.0.1:21000"' in pgsql
    assert 'monitor_username="monitor"' in pgsql
    assert 'monitor_password="monitor-secret"' in pgsql
    assert "monitor_read_only_interval=200" in pgsql
    assert "monitor_read_only_timeout=800" in pgsql
    assert "refresh_interval=500" in group(text, "admin_variables")


def test_proxysql_hostgroups_and_users(tmp_path: Path) -> None:
    text = cnf(make(ProxySQLProxy, make_settings(tmp_path)))
    assert rows(text, "pgsql_servers") == [
        '{ address="127.0.0.1" port=5433 hostgroup_id=10 comment="node0" }',
        '{ address="127.0.0.1" port=5434 hostgroup_id=20 comment="node1" }',
        '{ address="127.0.0.1" port=5435 hostgroup_id=20 comment="node2" }',
    ]
    assert rows(text, "pgsql_users") == [
        '{ username="app" password="app-secret" default_hostgroup=10 }'
    ]
    assert "pgsql_replication_hostgroups" not in text
    assert "pgsql_query_rules" not in text


def test_proxysql_monitor_adds_replication_hostgroup(tmp_path: Path) -> None:
    text = cnf(make(ProxySQLProxy, make_settings(tmp_path, monitor=True)))
    assert rows(text, "pgsql_replication_hostgroups") == [
        '{ writer_hostgroup=10 reader_hostgroup=20 check_type="read_only" comment="pgha" }'
    ]


def test_proxysql_read_port_routes_to_readers(tmp_path: Path) -> None:
    proxy = make(ProxySQLProxy, make_settings(tmp_path, read_port=21002))
    text = cnf(proxy)
    assert 'interfaces="127.0.0.1:21000;127.0.0.1:21002"' in group(text, "pgsql_variables")
    assert rows(text, "pgsql_query_rules") == [
        "{ rule_id=1 active=1 proxy_port=21002 destination_hostgroup=20 apply=1 }"
    ]
    assert proxy.ro_dsn is not None and "port=21002" in proxy.ro_dsn


def test_proxysql_after_failover_node1_is_writer(tmp_path: Path) -> None:
    settings = make_settings(tmp_path).with_primary("node1")
    servers = rows(cnf(make(ProxySQLProxy, settings)), "pgsql_servers")
    assert servers[0] == '{ address="127.0.0.1" port=5434 hostgroup_id=10 comment="node1" }'
    assert sum("hostgroup_id=10" in row for row in servers) == 1


def test_proxysql_argv(tmp_path: Path) -> None:
    proxy = make(ProxySQLProxy, make_settings(tmp_path))
    assert proxy.argv() == [
        "/opt/bin/proxysql",
        "-f",
        "--initial",
        "--no-version-check",
        "-c",
        str(tmp_path / "proxysql.cnf"),
        "-D",
        str(tmp_path / "data"),
    ]


def test_proxysql_write_config_creates_the_datadir(tmp_path: Path) -> None:
    make(ProxySQLProxy, make_settings(tmp_path)).write_config()
    assert (tmp_path / "data").is_dir()
    assert (tmp_path / "proxysql.cnf").exists()


def test_proxysql_rewire_statements_follow_the_lab(tmp_path: Path) -> None:
    proxy = make(ProxySQLProxy, make_settings(tmp_path))
    assert proxy.rewire_statements("node1") == [
        "DELETE FROM pgsql_servers WHERE hostname = '127.0.0.1' AND port = 5433",
        "DELETE FROM pgsql_servers WHERE hostname = '127.0.0.1' AND port = 5434",
        "INSERT INTO pgsql_servers (hostgroup_id, hostname, port, comment) "
        "VALUES (10, '127.0.0.1', 5434, 'node1')",
        "LOAD PGSQL SERVERS TO RUNTIME",
    ]


def test_proxysql_rewire_sends_the_statements_and_drops_the_old_primary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []

    class FakeConsole:
        def __init__(self, dsn: str, **options: object) -> None:
            assert "port=21001" in dsn and "dbname=admin" in dsn

        def open(self) -> None:
            return None

        def query(self, sql: str) -> list[dict[str, str | None]]:
            sent.append(sql)
            return []

        def close(self) -> None:
            return None

    monkeypatch.setattr("pytest_pgha.proxies.admin.AdminConsole", FakeConsole)
    proxy = make(ProxySQLProxy, make_settings(tmp_path))
    proxy.after_start()  # opens the kept admin sessions
    expected = proxy.rewire_statements("node1")
    proxy.rewire("node1")
    assert sent == expected
    assert proxy.settings.primary.name == "node1"
    assert [b.name for b in proxy.settings.backends] == ["node1", "node2"]


@pytest.mark.parametrize("cls", [PgCatProxy, PgDogProxy, ProxySQLProxy])
def test_rewire_to_an_unknown_node_changes_nothing(
    cls: type[Proxy], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = make(cls, make_settings(tmp_path))
    sent = record_admin(monkeypatch, proxy)
    before = proxy.settings
    with pytest.raises(ProxyError, match="no backend 'node9'"):
        proxy.rewire("node9")
    assert proxy.settings == before and sent == []
    assert not (tmp_path / "pgcat.toml").exists() and not (tmp_path / "pgdog.toml").exists()
