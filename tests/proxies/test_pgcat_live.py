"""A real PgCat in front of a real 1 primary + 2 replica cluster: write through it, lose
the primary, promote a replica, rewire, write again, and see the new writer in sample()."""

from __future__ import annotations

import secrets
import statistics
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pytest_pgha.proxies.base import ProxySettings
from pytest_pgha.proxies.cluster_settings import backends_of
from pytest_pgha.proxies.pgcat import PgCatProxy
from pytest_pgha.proxies.samples import WRITER_UP

BINARY = PgCatProxy.locate()

pytestmark = pytest.mark.skipif(
    BINARY is None, reason=f"pgcat not found on PATH. Install: {PgCatProxy.install_hint}"
)

WRITE = "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1"
READ = "SELECT abalance FROM pgbench_accounts WHERE aid = 1"


def write_once(dsn: str) -> None:
    """One lab-style transaction (BEGIN; UPDATE; COMMIT) on a fresh connection."""
    with psycopg.connect(dsn) as conn:
        conn.execute(WRITE)  # psycopg opens the transaction; the block commits it


def write_until_ok(dsn: str, timeout: float = 15.0) -> float:
    """Retry like a reconnecting client; returns the seconds it took."""
    started = time.monotonic()
    while True:
        try:
            write_once(dsn)
            return time.monotonic() - started
        except psycopg.Error:
            if time.monotonic() - started > timeout:
                raise
            time.sleep(0.05)


@pytest.fixture
def pgcat(pgha_cluster: Any, pgha_sandbox: Any) -> Iterator[PgCatProxy]:
    assert BINARY is not None
    ports = [pgha_sandbox.ports.reserve("pgcat"), pgha_sandbox.ports.reserve("pgcat-admin")]
    settings = ProxySettings(
        workdir=pgha_sandbox.test_dir("pgcat"),
        listen_port=ports[0],
        # PgCat's admin console shares the client port; the second one stays unused.
        admin_port=ports[1],
        backends=backends_of(pgha_cluster),
        app_password=pgha_cluster.credentials.app,
        monitor_password=pgha_cluster.credentials.monitor,
        admin_password=secrets.token_urlsafe(12),
    )
    proxy = PgCatProxy(settings, pgha_sandbox, BINARY)
    try:
        proxy.start()
        yield proxy
    finally:
        proxy.stop()
        for port in ports:
            pgha_sandbox.ports.release(port)


def test_pgcat_failover_through_rewire(pgcat: PgCatProxy, pgha_cluster: Any) -> None:
    cluster = pgha_cluster
    old, new = cluster.primary, cluster.replicas[0]

    write_once(pgcat.rw_dsn)
    before = pgcat.sample()
    assert before.writer == f"127.0.0.1:{old.port}"
    assert before.writer_state == WRITER_UP
    # Asynchronous replication: let the promoted node have the first write for sure.
    cluster.wait_for_replay()

    old.stop("immediate")
    cluster.promote(new)
    pgcat.rewire(new.name)

    write_until_ok(pgcat.rw_dsn)
    after = pgcat.sample()
    assert after.writer == f"127.0.0.1:{new.port}"
    assert after.writer_state == WRITER_UP
    # pgbench -i starts at 0: one write before the failover, one after, both on new.
    assert new.value(READ) == 2


def test_pgcat_sample_is_fast(pgcat: PgCatProxy) -> None:
    pgcat.sample()  # opens the kept admin connection
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        sample = pgcat.sample()
        timings.append(time.perf_counter() - started)
        assert sample.writer_state == WRITER_UP
    assert statistics.median(timings) < 0.020, timings
