"""PgBouncer, HAProxy and the direct baseline: what they are configured with, and
that each routes writes to a new primary after a real failover."""

import configparser
import time
from pathlib import Path

import psycopg
import pytest

from pytest_pgha.proxies.base import Backend, ProxySettings
from pytest_pgha.proxies.cluster_settings import proxy_settings
from pytest_pgha.proxies.direct import DirectProxy
from pytest_pgha.proxies.haproxy import HAProxyProxy
from pytest_pgha.proxies.pgbouncer import PgBouncerProxy
from pytest_pgha.proxies.registry import adapter


def fake_settings(**changes):
    backends = (
        Backend("node0", "127.0.0.1", 5433, "primary"),
        Backend("node1", "127.0.0.1", 5434, "replica"),
        Backend("node2", "127.0.0.1", 5435, "replica"),
    )
    values = dict(
        workdir=Path("/tmp/pgha-unit"),
        listen_port=6432,
        admin_port=6433,
        read_port=6434,
        backends=backends,
        app_password="app-secret",
        monitor_password="mon-secret",
        pg_bindir=Path("/usr/lib/postgresql/15/bin"),
    )
    values.update(changes)
    return ProxySettings(**values)


def test_pgbouncer_ini_points_at_the_primary_with_failover_defaults():
    proxy = PgBouncerProxy(fake_settings(options={"server_login_retry": "1"}), None, "pgbouncer")
    files = proxy.render()
    ini = configparser.ConfigParser()
    ini.read_string(files["pgbouncer.ini"])
    assert ini["databases"]["app"] == "host=127.0.0.1 port=5433 dbname=app"
    bouncer = ini["pgbouncer"]
    assert bouncer["listen_addr"] == "127.0.0.1" and bouncer["listen_port"] == "6432"
    assert bouncer["auth_type"] == "scram-sha-256"
    assert bouncer["server_login_retry"] == "1"  # the override wins over the default 0
    assert bouncer["pool_mode"] == "transaction"
    assert '"app" "app-secret"' in files["userlist.txt"]
    assert proxy.ro_dsn is None  # no read failover in PgBouncer


def test_haproxy_explicit_has_one_writer_and_checks_the_read_pool():
    cfg = HAProxyProxy(fake_settings(), None, "haproxy").render()["haproxy.cfg"]
    assert "server writer 127.0.0.1:5433" in cfg
    assert "stats socket ipv4@127.0.0.1:6433 level admin" in cfg
    assert "bind 127.0.0.1:6434" in cfg and "server node1 127.0.0.1:5434 check" in cfg
    assert "external-check" not in cfg
    assert "timeout connect 250ms" in cfg and "retries 1" in cfg


def test_haproxy_monitor_checks_every_node_for_the_primary():
    files = HAProxyProxy(fake_settings(monitor=True), None, "haproxy").render()
    cfg, script = files["haproxy.cfg"], files["pg-is-primary.sh"]
    assert "insecure-fork-wanted" in cfg and "option external-check" in cfg
    for port in (5433, 5434, 5435):
        assert f"127.0.0.1:{port} check" in cfg
    assert "pg_is_in_recovery()" in script and "/usr/lib/postgresql/15/bin/psql" in script
    assert script.startswith("#!/bin/sh")


def test_direct_is_a_libpq_multi_host_dsn():
    proxy = DirectProxy(fake_settings(), None, "libpq")
    assert "host=127.0.0.1,127.0.0.1,127.0.0.1 port=5433,5434,5435" in proxy.rw_dsn
    assert "target_session_attrs=read-write" in proxy.rw_dsn
    assert "target_session_attrs=prefer-standby" in proxy.ro_dsn


def test_settings_after_failover_name_one_primary():
    after = fake_settings().with_primary("node1")
    assert after.primary.name == "node1"
    assert [b.name for b in after.replicas] == ["node0", "node2"]


def write_once(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "UPDATE pgbench_accounts SET abalance = abalance + 1 "
            "WHERE aid = 1 RETURNING inet_server_port()"
        ).fetchone()[0]


def wait_for_write(dsn, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return write_once(dsn)
        except psycopg.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture
def started(request, pgha_cluster, pgha_sandbox):
    kind, monitor = request.param
    cls = adapter(kind)
    binary = cls.locate()
    if binary is None:
        pytest.skip(f"{kind} not installed: {cls.install_hint}")
    settings, ports = proxy_settings(pgha_cluster, pgha_sandbox, kind, monitor=monitor)
    proxy = cls(settings, pgha_sandbox, binary)
    proxy.start()
    yield proxy
    proxy.stop()
    for port in ports:
        pgha_sandbox.ports.release(port)


@pytest.mark.parametrize(
    "started",
    [("pgbouncer", False), ("haproxy", False), ("haproxy", True), ("direct", False)],
    ids=["pgbouncer", "haproxy", "haproxy-monitor", "direct"],
    indirect=True,
)
def test_writes_follow_the_new_primary(started, pgha_cluster):
    old, new = pgha_cluster.primary, pgha_cluster.replicas[0]
    assert wait_for_write(started.rw_dsn) == old.port
    sample = started.sample()
    assert sample.writer == f"127.0.0.1:{old.port}" and sample.writer_state == 1

    old.kill()
    pgha_cluster.promote(new)
    if not started.settings.monitor:
        started.rewire(new.name)

    assert wait_for_write(started.rw_dsn) == new.port
    deadline = time.monotonic() + 5
    while started.sample().writer != f"127.0.0.1:{new.port}":
        assert time.monotonic() < deadline, "the sampler never saw the new writer"
        time.sleep(0.05)


@pytest.mark.parametrize(
    "started",
    [("pgbouncer", False), ("haproxy", False)],
    ids=["pgbouncer", "haproxy"],
    indirect=True,
)
def test_a_crashed_proxy_restarts_on_its_config(started):
    started.kill()
    assert not started.process.running()
    with pytest.raises(psycopg.OperationalError):
        write_once(started.rw_dsn)
    started.restart()
    assert wait_for_write(started.rw_dsn)


@pytest.mark.parametrize("started", [("haproxy", False)], ids=["haproxy"], indirect=True)
def test_haproxy_retries_a_dead_writer_as_configured(started, pgha_cluster):
    """A client that connects while the writer is down is turned away after one retry
    (HAProxy's default is 3, at min(timeout connect, 1 s) each): HAProxy's own
    counters say how many attempts it made."""
    pgha_cluster.primary.kill()
    with pytest.raises(psycopg.OperationalError):
        write_once(started.rw_dsn)
    (writer,) = [r for r in started.stats() if r["svname"] == "writer"]
    assert (writer["econ"], writer["wretr"]) == ("1", "1")
