"""The synchronous-replication talk's claims about a commit, each shown on a real
cluster: a commit is local first (claim 1), zero RPO depends on the session and on
what happens to a waiting commit (claim 2), and a synchronous standby is not the
primary (claim 3). Claim 4 (the safe way to make a standby synchronous) is shown under
load in suites/durability (test_making_a_standby_synchronous_*)."""

import socket
import time

import psycopg
import pytest

from pytest_pgha.poll import wait_until

sync_pair = pytest.mark.parametrize("pgha_cluster", ["sync_pair"], indirect=True)
WAITING_SQL = "SELECT wait_event FROM pg_stat_activity WHERE pid = %s"


def value_of_row(node):
    return node.value("SELECT v FROM t WHERE id = 1")


def await_sync_wait(primary, pid):
    wait_until(
        lambda: primary.value(WAITING_SQL, [pid]) == "SyncRep",
        timeout=10,
        what=f"backend {pid} to wait for the synchronous standby",
    )


def cut_standby(cluster, links):
    standby = cluster.replicas[0]
    links[standby.name].cut()
    return links[standby.name]


@sync_pair
def test_a_commit_is_local_first_and_waits_holding_its_locks(
    pgha_cluster, pgha_replication_links, table, in_background
):
    primary = pgha_cluster.primary
    link = cut_standby(pgha_cluster, pgha_replication_links)
    writer = primary.connect()
    pid = writer.info.backend_pid
    commit = in_background(lambda: writer.execute("UPDATE t SET v = 1 WHERE id = 1"))
    await_sync_wait(primary, pid)
    xid = primary.value("SELECT backend_xid::text FROM pg_stat_activity WHERE pid = %s", [pid])
    # Written to the primary's WAL, yet nobody else sees it, and its lock is held.
    assert value_of_row(primary) == 0
    assert primary.value("SELECT pg_xact_status(%s::xid8)", [xid]) == "in progress"
    with primary.connect() as other:
        other.execute("SET lock_timeout = '200ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            other.execute("UPDATE t SET v = 2 WHERE id = 1")
    assert not commit.done
    link.mend()
    commit.join()
    assert value_of_row(primary) == 1
    assert primary.value("SELECT pg_xact_status(%s::xid8)", [xid]) == "committed"
    writer.close()


@sync_pair
def test_synchronous_commit_local_in_the_session_does_not_wait(
    pgha_cluster, pgha_replication_links, table, in_background
):
    primary = pgha_cluster.primary
    cut_standby(pgha_cluster, pgha_replication_links)
    with primary.connect() as writer:
        writer.execute("SET synchronous_commit = local")
        in_background(lambda: writer.execute("UPDATE t SET v = 1 WHERE id = 1")).join(10)
    assert value_of_row(primary) == 1
    assert value_of_row(pgha_cluster.replicas[0]) == 0  # the standby never got it


@sync_pair
def test_a_cancelled_wait_is_reported_as_success_with_a_warning_and_visible(
    pgha_cluster, pgha_replication_links, table, in_background
):
    primary = pgha_cluster.primary
    cut_standby(pgha_cluster, pgha_replication_links)
    writer = primary.connect()
    notices: list[str] = []
    writer.add_notice_handler(lambda diagnostic: notices.append(diagnostic.message_primary))
    commit = in_background(lambda: writer.execute("UPDATE t SET v = 1 WHERE id = 1"))
    await_sync_wait(primary, writer.info.backend_pid)
    primary.sql("SELECT pg_cancel_backend(%s)", [writer.info.backend_pid])
    commit.join()  # no exception: COMMIT "succeeded"
    assert any("canceling wait for synchronous replication" in n for n in notices), notices
    assert value_of_row(primary) == 1
    assert value_of_row(pgha_cluster.replicas[0]) == 0
    writer.close()


@sync_pair
def test_a_terminated_waiting_backend_leaves_its_commit_visible(
    pgha_cluster, pgha_replication_links, table, in_background
):
    primary = pgha_cluster.primary
    cut_standby(pgha_cluster, pgha_replication_links)
    writer = primary.connect()
    commit = in_background(lambda: writer.execute("UPDATE t SET v = 1 WHERE id = 1"))
    await_sync_wait(primary, writer.info.backend_pid)
    primary.sql("SELECT pg_terminate_backend(%s)", [writer.info.backend_pid])
    with pytest.raises(psycopg.OperationalError):
        commit.join()  # the client never learns the outcome
    assert value_of_row(primary) == 1


@sync_pair
def test_a_client_whose_connection_broke_still_commits_once_the_standby_is_back(
    pgha_cluster, pgha_replication_links, table, in_background
):
    """The client gave up (its socket closed); the server goes on waiting, unseen,
    and commits when the standby answers."""
    primary = pgha_cluster.primary
    link = cut_standby(pgha_cluster, pgha_replication_links)
    writer = primary.connect()
    pid = writer.info.backend_pid
    in_background(lambda: writer.execute("UPDATE t SET v = 1 WHERE id = 1"))
    await_sync_wait(primary, pid)
    xid = primary.value("SELECT backend_xid::text FROM pg_stat_activity WHERE pid = %s", [pid])
    # Shut the socket down under libpq (closing the connection from this thread while
    # another waits in it is not allowed).
    sock = socket.socket(fileno=writer.pgconn.socket)
    sock.shutdown(socket.SHUT_RDWR)
    sock.detach()
    time.sleep(0.2)
    assert primary.value(WAITING_SQL, [pid]) == "SyncRep"
    assert primary.value("SELECT pg_xact_status(%s::xid8)", [xid]) == "in progress"
    link.mend()
    wait_until(lambda: value_of_row(primary) == 1, timeout=30, what="the commit to show")
    assert primary.value("SELECT pg_xact_status(%s::xid8)", [xid]) == "committed"


@sync_pair
def test_a_restart_makes_a_waiting_commit_visible(
    pgha_cluster, pgha_replication_links, table, in_background
):
    """Crash recovery replays the commit record the primary had flushed before it
    waited: after the restart the row is there, though no standby ever had it."""
    primary = pgha_cluster.primary
    cut_standby(pgha_cluster, pgha_replication_links)
    writer = primary.connect()
    commit = in_background(lambda: writer.execute("UPDATE t SET v = 1 WHERE id = 1"))
    await_sync_wait(primary, writer.info.backend_pid)
    primary.crash()
    with pytest.raises(psycopg.OperationalError):
        commit.join()
    primary.restart_after_crash()
    with primary.connect() as session:
        session.execute("SET synchronous_commit = local")  # reading needs no standby
        assert session.execute("SELECT v FROM t WHERE id = 1").fetchone() == (1,)


@pytest.mark.parametrize("pgha_cluster", ["both_apply"], indirect=True)
def test_with_remote_apply_a_synchronous_standby_shows_a_commit_the_primary_still_hides(
    pgha_cluster, pgha_replication_links, table, in_background
):
    """FIRST 2 (node1, node2), remote_apply, node2 unreachable: node1 has applied the
    change and serves it, while the primary's other sessions cannot see it yet."""
    primary, node1, node2 = pgha_cluster.primary, *pgha_cluster.replicas
    pgha_replication_links[node2.name].cut()
    writer = primary.connect()
    in_background(lambda: writer.execute("UPDATE t SET v = 1 WHERE id = 1"))
    await_sync_wait(primary, writer.info.backend_pid)
    wait_until(lambda: value_of_row(node1) == 1, timeout=10, what="node1 to apply the change")
    assert value_of_row(primary) == 0 and value_of_row(node2) == 0


@pytest.mark.parametrize("pgha_cluster", ["first_of_trio"], indirect=True)
def test_an_asynchronous_standby_can_be_ahead_of_the_synchronous_one(
    pgha_cluster, pgha_replication_links, table, in_background
):
    """FIRST 1 (node1), node2 asynchronous: with node1 unreachable the commit waits,
    node2 has it already, node1 does not."""
    primary, node1, node2 = pgha_cluster.primary, *pgha_cluster.replicas
    pgha_replication_links[node1.name].cut()
    writer = primary.connect()
    in_background(lambda: writer.execute("UPDATE t SET v = 1 WHERE id = 1"))
    await_sync_wait(primary, writer.info.backend_pid)
    wait_until(lambda: value_of_row(node2) == 1, timeout=10, what="node2 to replay the change")
    assert value_of_row(node1) == 0 and value_of_row(primary) == 0
