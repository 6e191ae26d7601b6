"""After a failover: the old primary needs pg_rewind to rejoin, even with synchronous
replication (claim 5); and under quorum replication a failover must hear from enough
standbys to be sure it promotes one with every acknowledged commit (claim 7)."""

import time

import pytest

from pytest_pgha.errors import ClusterError
from pytest_pgha.ha.scripted import ScriptedHA, quorum_needed
from pytest_pgha.poll import wait_until
from pytest_pgha.timeline import Timeline

DIVERGED = (
    "forked off current database system timeline",
    "is not in this server's history",
    "not a child of this server's history",
)


@pytest.mark.parametrize("pgha_cluster", ["sync_pair"], indirect=True)
def test_the_old_primary_needs_pg_rewind_to_rejoin_even_with_synchronous_replication(
    pgha_cluster, pgha_replication_links, table, in_background
):
    """A commit waiting for the standby is in the old primary's WAL, never in the
    standby's: the histories diverge at the promotion, and only pg_rewind brings the
    old primary back."""
    old, standby = pgha_cluster.primary, pgha_cluster.replicas[0]
    pgha_replication_links[standby.name].cut()
    writer = old.connect()
    in_background(lambda: writer.execute("UPDATE t SET v = 1 WHERE id = 1"))
    wait_until(
        lambda: (
            old.value(
                "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", [writer.info.backend_pid]
            )
            == "SyncRep"
        ),
        timeout=10,
        what="the commit to wait for the standby",
    )
    old.crash()
    pgha_replication_links[standby.name].mend()
    pgha_cluster.promote(standby)

    old.rejoin(standby, rewind=False)  # starts, but cannot follow
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(s in old.logs() for s in DIVERGED):
        time.sleep(0.2)
    assert any(s in old.logs() for s in DIVERGED), old.logs(40)
    assert old.name not in pgha_cluster.topology().streaming()

    output = pgha_cluster.rejoin(old, rewind=True)
    assert "Done!" in output or "rewinding" in output, output
    assert old.name in pgha_cluster.topology().streaming()
    # The commit the standby never had is gone from the rejoined node too.
    assert old.value("SELECT v FROM t WHERE id = 1") == 0


def test_quorum_needs_m_minus_n_plus_one_answers():
    from pytest_pgha.cluster.spec import SyncMode

    assert quorum_needed(SyncMode("ANY", 1, ("a", "b", "c"))) == 3
    assert quorum_needed(SyncMode("ANY", 2, ("a", "b", "c"))) == 2
    assert quorum_needed(SyncMode("FIRST", 1, ("a",))) == 1
    assert quorum_needed(SyncMode("off")) == 0


@pytest.mark.parametrize("pgha_cluster", ["quorum_trio"], indirect=True)
def test_a_quorum_failover_refuses_to_promote_without_enough_standbys(pgha_cluster):
    """ANY 1 (node1, node2): a commit was acknowledged once either had it, so only
    hearing from both tells which has everything. With node2 down the scripted HA
    manager refuses; the cluster stays without a primary rather than lose commits."""
    primary, node1, node2 = pgha_cluster.primary, *pgha_cluster.replicas
    node2.stop("immediate")
    primary.crash()
    ha = ScriptedHA(pgha_cluster, None, Timeline())
    with pytest.raises(ClusterError, match=r"must hear from 2 of the listed standbys"):
        ha.fail_over(Timeline().record("inject", fault="kill_primary"))
    assert node1.is_in_recovery()


@pytest.mark.parametrize("pgha_cluster", ["quorum_trio"], indirect=True)
def test_a_quorum_failover_promotes_the_most_advanced_and_keeps_the_quorum(pgha_cluster):
    primary = pgha_cluster.primary
    primary.sql("CREATE TABLE IF NOT EXISTS t (i int)")
    primary.sql("INSERT INTO t SELECT generate_series(1, 1000)")
    primary.crash()
    timeline = Timeline()
    ha = ScriptedHA(pgha_cluster, None, timeline)
    new = ha.fail_over(timeline.record("inject", fault="kill_primary"))
    assert new is pgha_cluster.primary and new.value("SELECT count(*) FROM t") == 1000
    promote = next(e for e in timeline.events if e.name == "promote_start")
    other = next(n.name for n in pgha_cluster.replicas if n is not primary and n is not new)
    assert promote.detail["synchronous"] == f"ANY 1 ({other})"
    assert new.value("SHOW synchronous_standby_names") == f"ANY 1 ({other})"
