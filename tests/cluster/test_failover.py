"""Promotion, and the old primary back as a replica: pg_rewind when timelines diverged."""

from __future__ import annotations

from cluster_helpers import count, eventually

from pytest_pgha.cluster.cluster import Cluster


def test_promote_and_rewind_a_diverged_old_primary(fresh: Cluster) -> None:
    """Split brain for a moment: node1 is promoted while node0 still takes writes.
    Rejoining node0 must undo those writes (pg_rewind), then stream timeline 2."""
    old, new, other = fresh.nodes
    old.sql("CREATE TABLE t (id int)", user="app")
    fresh.wait_for_replay()
    fresh.promote(new)
    assert not new.is_in_recovery()
    assert new.timeline() == 2
    old.sql("INSERT INTO t VALUES (1)", user="app")  # only timeline 1 has it
    new.sql("INSERT INTO t VALUES (2)", user="app")
    old.stop("fast")
    output = fresh.rejoin(old)
    assert "no rewind required" not in output
    assert "Done!" in output
    # other followed old on timeline 1 and got the lost write too: it diverged as well.
    fresh.rejoin(other)
    fresh.wait_for_replay()
    topology = fresh.topology()
    assert (topology.primary, topology.timeline) == ("node1", 2)
    assert topology.streaming() == ["node0", "node2"]
    for node in (old, other):
        assert node.is_in_recovery()
        assert node.sql("SELECT id FROM t ORDER BY id") == [(2,)]
        assert node.timeline() == 2


def test_rejoin_a_crashed_old_primary(fresh: Cluster) -> None:
    """A power loss on the primary: pg_rewind first recovers the crashed data
    directory (it was not shut down cleanly), then the node follows the new primary."""
    old, new, other = fresh.nodes
    old.sql("CREATE TABLE t (id int)", user="app")
    fresh.wait_for_replay()
    old.kill()
    fresh.promote(new)
    other.follow(new)
    fresh.wait_streaming([other])
    fresh.rejoin(old)
    new.sql("INSERT INTO t VALUES (3)", user="app")
    fresh.wait_for_replay()
    assert count(old, "t", "id = 3") == 1
    assert count(other, "t", "id = 3") == 1
    assert fresh.topology().streaming() == ["node0", "node2"]


def test_rejoin_without_divergence_needs_no_rewind(pair: Cluster) -> None:
    replica = pair.replicas[0]
    replica.stop("fast")
    output = pair.rejoin(replica)
    assert "no rewind required" in output
    assert pair.topology().streaming() == ["node1"]


def test_promoted_primary_takes_writes_and_slots(fresh: Cluster) -> None:
    old, new, other = fresh.nodes
    old.stop("fast")
    fresh.promote(new)
    assert fresh.primary is new
    assert fresh.replicas == [old, other]
    other.follow(new)
    fresh.wait_streaming([other])
    slots = new.sql("SELECT slot_name, active FROM pg_replication_slots ORDER BY 1")
    assert slots == [("node2", True)]
    new.sql("CREATE TABLE after_failover (id int)", user="app")
    fresh.wait_for_replay(standbys=[other])
    eventually(lambda: count(other, "after_failover") == 0, "the table on node2")


def test_rejoin_clears_the_old_primarys_slots(fresh: Cluster) -> None:
    old, new, other = fresh.nodes
    assert {r[0] for r in old.sql("SELECT slot_name FROM pg_replication_slots")} == {
        "node1",
        "node2",
    }
    old.stop("fast")
    fresh.promote(new)
    fresh.rejoin(old)
    # Slots left on a standby would hold back its WAL for consumers that are gone.
    assert old.sql("SELECT slot_name FROM pg_replication_slots") == []
    assert other.upstream is old  # untouched: still following the old primary's stream


def test_a_crashed_standby_rejoins_without_a_record_of_its_own(fresh: Cluster) -> None:
    """A standby that lost power, on the primary's own timeline: it recovers in
    standby mode and follows again. (Crash recovery in single-user mode, pg_rewind's
    own way, appended an end-of-recovery checkpoint the primary never wrote, and the
    standby then waited forever for WAL it could not read.)"""
    primary, standby, _ = fresh.nodes
    primary.sql("CREATE TABLE t (id int)", user="app")
    primary.sql("INSERT INTO t SELECT generate_series(1, 1000)", user="app")
    fresh.wait_for_replay()
    standby.crash()
    assert not standby.running()  # at once, reaped or not: heal() must see it down
    primary.sql("INSERT INTO t SELECT generate_series(1001, 2000)", user="app")
    output = fresh.rejoin(standby)
    assert "no rewind required" in output
    primary.sql("INSERT INTO t VALUES (2001)", user="app")
    fresh.wait_for_replay(standbys=[standby], timeout=20)
    assert count(standby, "t") == 2001


def test_a_standby_that_followed_a_promotion_and_crashed_needs_no_rewind(fresh: Cluster) -> None:
    """Its WAL is within the new timeline's history: it follows again as it is (the
    decision is Patroni's: where its WAL ends against the timeline's switch point)."""
    old, new, other = fresh.nodes
    old.sql("CREATE TABLE t (id int)", user="app")
    fresh.wait_for_replay()
    old.stop("fast")
    fresh.promote(new)
    other.follow(new)
    fresh.wait_streaming([other])
    new.sql("INSERT INTO t SELECT generate_series(1, 1000)", user="app")
    fresh.wait_for_replay(standbys=[other])
    other.crash()
    output = fresh.rejoin(other)
    assert "no rewind required" in output and "timeline 2" in output, output
    new.sql("INSERT INTO t VALUES (1001)", user="app")
    fresh.wait_for_replay(standbys=[other], timeout=20)
    assert count(other, "t") == 1001
