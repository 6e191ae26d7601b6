"""Synchronous replication really blocks, and the myths of the talk "Myths and Truths
about Synchronous Replication in PostgreSQL" (Kukushkin, PGConf.DE 2025), shown on a
real cluster."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from cluster_helpers import count, eventually, start_blocking, wait_event

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.lsn import lsn_to_int
from pytest_pgha.errors import PghaConfigError

STILL_BLOCKED_S = 0.3  # how long a blocked commit must stay blocked to count as blocked


def _blocked_insert(cluster: Cluster, pool: ThreadPoolExecutor, value: int) -> int:
    """INSERT on the primary in its own session; return its pid once it waits."""
    pid, future = start_blocking(pool, cluster.primary, f"INSERT INTO t VALUES ({value})")
    eventually(lambda: wait_event(cluster.primary, pid) == "SyncRep", "the commit to wait")
    time.sleep(STILL_BLOCKED_S)
    assert not future.done(), "the commit returned without its synchronous standby"
    return pid


def test_sync_standby_is_reported(sync_cluster: Cluster) -> None:
    topology = sync_cluster.topology()
    assert topology.synchronous() == ["node1"]
    assert topology.standbys["node1"].sync_state == "sync"
    assert topology.standbys["node2"].sync_state == "async"
    assert topology.synchronous_standby_names == "FIRST 1 (node1)"


def test_commit_blocks_while_the_sync_standby_is_stopped(
    sync_cluster: Cluster, background: ThreadPoolExecutor
) -> None:
    """Myth 1: the commit is local first; it stays invisible on the primary while it
    waits (Truth 1), yet an asynchronous standby already shows it (Myth 3's side
    effect: async standbys can be ahead of sync ones)."""
    primary, sync, asynchronous = sync_cluster.nodes
    primary.sql("CREATE TABLE t (id int)", user="app")
    sync.stop("fast")
    pid, future = start_blocking(background, primary, "INSERT INTO t VALUES (1)")
    eventually(lambda: wait_event(primary, pid) == "SyncRep", "the commit to wait")
    time.sleep(STILL_BLOCKED_S)
    assert not future.done()
    assert count(primary, "t") == 0
    eventually(lambda: count(asynchronous, "t") == 1, "the async standby to show the row")
    sync.start()
    future.result(timeout=30)
    assert count(primary, "t") == 1
    assert count(sync, "t") == 1


def test_cancelled_wait_makes_an_unreplicated_commit_visible(
    sync_cluster: Cluster, background: ThreadPoolExecutor
) -> None:
    """Myth 2: a cancelled wait leaves a commit that no standby has, visible."""
    primary, sync, _ = sync_cluster.nodes
    primary.sql("CREATE TABLE t (id int)", user="app")
    sync.stop("fast")
    pid, future = start_blocking(background, primary, "INSERT INTO t VALUES (2)")
    eventually(lambda: wait_event(primary, pid) == "SyncRep", "the commit to wait")
    primary.sql("SELECT pg_cancel_backend(%s)", [pid])
    notices = future.result(timeout=10)
    assert any("canceling wait for synchronous replication" in n for n in notices)
    assert count(primary, "t") == 1  # committed, visible, and on no synchronous standby


def test_synchronous_commit_local_does_not_wait(sync_cluster: Cluster) -> None:
    """Myth 2: synchronous_commit = local, per session, opts out of the guarantee."""
    primary, sync, _ = sync_cluster.nodes
    primary.sql("CREATE TABLE t (id int)", user="app")
    sync.stop("fast")
    with primary.connect("app") as conn:
        conn.execute("SET synchronous_commit = local")
        conn.execute("INSERT INTO t VALUES (3)")
    assert count(primary, "t") == 1


def test_first_falls_back_to_the_next_listed_standby(
    fresh: Cluster, background: ThreadPoolExecutor
) -> None:
    primary, node1, node2 = fresh.nodes
    primary.sql("CREATE TABLE t (id int)", user="app")
    topology = fresh.set_synchronous("FIRST 1 (node1, node2)")
    assert topology.standbys["node1"].sync_state == "sync"
    assert topology.standbys["node2"].sync_state == "potential"
    node1.stop("fast")
    eventually(lambda: fresh.topology().synchronous() == ["node2"], "node2 to take over")
    primary.sql("INSERT INTO t VALUES (1)")  # node2 confirms: no wait
    node2.stop("fast")
    _blocked_insert(fresh, background, 2)


def test_any_quorum_blocks_only_without_a_quorum(
    fresh: Cluster, background: ThreadPoolExecutor
) -> None:
    primary, node1, node2 = fresh.nodes
    primary.sql("CREATE TABLE t (id int)", user="app")
    topology = fresh.set_synchronous("ANY 1 (*)")
    assert topology.synchronous() == ["node1", "node2"]
    assert {s.sync_state for s in topology.standbys.values()} == {"quorum"}
    node1.stop("fast")
    primary.sql("INSERT INTO t VALUES (1)")  # node2 is enough
    node2.stop("fast")
    _blocked_insert(fresh, background, 2)
    node2.start()
    eventually(lambda: count(primary, "t") == 2, "the commit to complete")


def test_set_synchronous_returns_once_the_standby_holds_the_insert_lsn(fresh: Cluster) -> None:
    """Myth 4: the safe sequence. When set_synchronous returns, the standby has flushed
    everything the primary had written when the setting took effect."""
    primary = fresh.primary
    primary.sql("CREATE TABLE t AS SELECT generate_series(1, 50000) AS id")
    before = lsn_to_int(primary.value("SELECT pg_current_wal_insert_lsn()")) or 0
    topology = fresh.set_synchronous("FIRST 1 (node2)")
    assert topology.synchronous() == ["node2"]
    assert topology.synchronous_standby_names == "FIRST 1 (node2)"
    flushed = topology.standbys["node2"].flush
    assert flushed is not None and flushed >= before
    assert primary.value("SHOW synchronous_standby_names") == "FIRST 1 (node2)"


def test_set_synchronous_then_a_stopped_standby_blocks(
    fresh: Cluster, background: ThreadPoolExecutor
) -> None:
    fresh.primary.sql("CREATE TABLE t (id int)", user="app")
    fresh.set_synchronous("FIRST 1 (node2)")
    fresh.node("node2").stop("fast")
    _blocked_insert(fresh, background, 1)


def test_set_synchronous_off_stops_waiting(
    sync_cluster: Cluster, background: ThreadPoolExecutor
) -> None:
    primary, sync, _ = sync_cluster.nodes
    primary.sql("CREATE TABLE t (id int)", user="app")
    sync.stop("fast")
    pid = _blocked_insert(sync_cluster, background, 1)
    topology = sync_cluster.set_synchronous("off")
    assert topology.synchronous() == [] and topology.synchronous_standby_names == ""
    # Waiters are released when the setting goes (SyncRepUpdateSyncStandbysDefined).
    eventually(lambda: wait_event(primary, pid) != "SyncRep", "the waiter to be released")
    primary.sql("INSERT INTO t VALUES (2)")
    assert count(primary, "t") == 2


def test_remote_apply_makes_commits_visible_on_the_standby(fresh: Cluster) -> None:
    """Myth 3's other half: with remote_apply, a committed row is readable on the
    synchronous standby at once (without it, only eventually)."""
    primary, node1, _ = fresh.nodes
    primary.sql("CREATE TABLE t (id int)", user="app")
    fresh.set_synchronous("FIRST 1 (node1)", synchronous_commit="remote_apply")
    assert primary.value("SHOW synchronous_commit") == "remote_apply"
    for value in range(20):
        primary.sql(f"INSERT INTO t VALUES ({value})")
        assert count(node1, "t", f"id = {value}") == 1


@pytest.mark.pgha_cluster(synchronous="ANY 2 (node1, node2)", synchronous_commit="remote_write")
def test_marker_options_reach_the_cluster(fresh: Cluster, background: ThreadPoolExecutor) -> None:
    """The pgha_cluster marker overrides the factory: quorum of both, remote_write."""
    primary, node1, _ = fresh.nodes
    assert primary.value("SHOW synchronous_commit") == "remote_write"
    assert fresh.topology().synchronous() == ["node1", "node2"]
    primary.sql("CREATE TABLE t (id int)", user="app")
    node1.stop("fast")  # ANY 2 of 2: one missing is enough to block
    _blocked_insert(fresh, background, 1)


@pytest.mark.parametrize(
    ("synchronous", "message"),
    [
        ("ANY 3 (*)", "ANY 3 needs between 1 and 2 of the 2 listed standbys"),
        ("FIRST 1 (node7)", "['node7'] are not replicas of this cluster"),
        ("FIRST 2 (node1, node1)", "a standby is listed twice"),
        ("SOME 1 (node1)", "write 'off', 'FIRST n (name, ...)' or 'ANY n (name, ...)'"),
    ],
)
def test_set_synchronous_rejects_impossible_modes(
    streaming: Cluster, synchronous: str, message: str
) -> None:
    with pytest.raises(PghaConfigError, match=re.escape(message)):
        streaming.set_synchronous(synchronous)
    assert streaming.primary.value("SHOW synchronous_standby_names") == ""


def test_set_synchronous_rejects_unknown_commit_level(streaming: Cluster) -> None:
    with pytest.raises(PghaConfigError, match="invalid synchronous_commit='sometimes'"):
        streaming.set_synchronous("ANY 1 (*)", synchronous_commit="sometimes")
    assert streaming.primary.value("SHOW synchronous_standby_names") == ""
