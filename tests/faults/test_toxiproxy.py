"""toxiproxy on the replication path: standbys stream through their links, a toxic
acts on replication, a cut link stops it, and teardown leaves nothing behind."""

import time

import pytest

from pytest_pgha.faults.toxiproxy import ToxiproxyError
from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory

SENDER_SQL = "SELECT sender_port FROM pg_stat_wal_receiver WHERE status = 'streaming'"

sync_pair = pgha_cluster_factory(replicas=1, synchronous="FIRST 1 (node1)")


@pytest.fixture
def pgha_cluster(sync_pair):
    return sync_pair


def test_standbys_stream_through_their_links(pgha_cluster, pgha_replication_links):
    standby = pgha_cluster.replicas[0]
    link = pgha_replication_links[standby.name]
    assert standby.value(SENDER_SQL) == link.listen_port
    assert link.upstream == (pgha_cluster.primary.host, pgha_cluster.primary.port)


def test_latency_on_the_link_delays_every_synchronous_commit(pgha_cluster, pgha_replication_links):
    """A synchronous commit waits for the standby's flush report: one round trip
    through the link, so at least twice the one-way latency (a lower bound: no machine
    is too slow for it)."""
    pgha_cluster.primary.sql("CREATE TABLE IF NOT EXISTS t (i int)")
    pgha_replication_links[pgha_cluster.replicas[0].name].latency(40)
    with pgha_cluster.primary.connect() as conn:
        for _ in range(3):
            started = time.monotonic()
            conn.execute("INSERT INTO t VALUES (1)")
            assert time.monotonic() - started >= 0.080


def test_jitter_varies_the_latency_around_its_mean(pgha_cluster, pgha_replication_links):
    """toxiproxy takes the jitter on both directions' toxics; each commit still waits
    at least a round trip at the lowest latency the jitter allows."""
    pgha_cluster.primary.sql("CREATE TABLE IF NOT EXISTS t (i int)")
    link = pgha_replication_links[pgha_cluster.replicas[0].name]
    link.latency(40, jitter_ms=30)
    toxics = link.server.api("GET", f"/proxies/{link.name}/toxics")
    assert sorted((t["stream"], t["attributes"]["jitter"]) for t in toxics) == [
        ("downstream", 30),
        ("upstream", 30),
    ]
    with pgha_cluster.primary.connect() as conn:
        for _ in range(5):
            started = time.monotonic()
            conn.execute("INSERT INTO t VALUES (1)")
            assert time.monotonic() - started >= 0.020


def test_a_disabled_link_cuts_replication_until_enabled(pgha_cluster, pgha_replication_links):
    standby = pgha_cluster.replicas[0]
    link = pgha_replication_links[standby.name]
    link.set_enabled(False)
    deadline = time.monotonic() + 10
    while standby.value(SENDER_SQL) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert standby.value(SENDER_SQL) is None
    link.set_enabled(True)
    pgha_cluster.wait_streaming([standby], timeout=30)


def test_an_unknown_toxic_is_refused_with_the_valid_ones(pgha_cluster, pgha_replication_links):
    link = next(iter(pgha_replication_links.values()))
    with pytest.raises(ToxiproxyError, match="latency, timeout, reset_peer"):
        link.add_toxic("lag")


def test_links_go_when_the_test_ends(pgha_toxiproxy):
    assert pgha_toxiproxy.api("GET", "/proxies") == {}
