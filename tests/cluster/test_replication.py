"""Replication streams, and the cluster reports it: topology, WAL positions, waits."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil
import psycopg
import pytest
from cluster_helpers import count

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.lsn import int_to_lsn, lsn_to_int
from pytest_pgha.errors import PghaConfigError
from pytest_pgha.sandbox.pstree import process_tree
from pytest_pgha.sandbox.runas import service_identity


def test_default_fixture_streams(pgha_cluster: Cluster) -> None:
    topology = pgha_cluster.topology()
    assert topology.primary == "node0"
    assert topology.streaming() == ["node1", "node2"]


def test_topology_snapshot(streaming: Cluster) -> None:
    topology = streaming.topology()
    assert topology.primary == "node0"
    assert topology.timeline == 1
    assert topology.in_recovery == {"node0": False, "node1": True, "node2": True}
    assert topology.streaming() == ["node1", "node2"]
    assert {s.sync_state for s in topology.standbys.values()} == {"async"}
    assert topology.synchronous() == []
    assert topology.synchronous_standby_names == ""


def test_writes_reach_every_replica(streaming: Cluster) -> None:
    streaming.primary.sql("CREATE TABLE IF NOT EXISTS streamed (id int)")
    streaming.primary.sql("INSERT INTO streamed SELECT generate_series(1, 100)")
    streaming.wait_for_replay()
    for replica in streaming.replicas:
        assert count(replica, "streamed") >= 100
        assert replica.is_in_recovery()


def test_replicas_are_read_only(streaming: Cluster) -> None:
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        streaming.replicas[0].sql("CREATE TABLE nope (id int)")


def test_pgbench_schema_on_every_node(streaming: Cluster) -> None:
    for node in streaming.nodes:
        assert count(node, "pgbench_accounts") == 100_000  # scale 1
        assert count(node, "pgbench_branches") == 1


def test_factory_settings_reach_every_node(streaming: Cluster) -> None:
    for node in streaming.nodes:
        assert node.value("SHOW work_mem") == "7MB"
        assert node.value("SHOW cluster_name") == node.name


def test_lag_is_zero_once_replayed(streaming: Cluster) -> None:
    streaming.primary.sql("CREATE TABLE IF NOT EXISTS lagging (id int)")
    streaming.primary.sql("INSERT INTO lagging VALUES (1)")
    streaming.wait_for_replay()
    streaming.wait_for_lsn(
        lsn_to_int(streaming.primary.value("SELECT pg_current_wal_lsn()")) or 0, kind="replay"
    )
    for state in streaming.topology().standbys.values():
        assert state.replay_lag_bytes == 0
        assert state.sent is not None and state.replay is not None
        assert state.sent >= state.flush >= state.replay  # type: ignore[operator]


@pytest.mark.parametrize("kind", ["write", "flush", "replay"])
def test_wait_for_lsn_each_kind(streaming: Cluster, kind: str) -> None:
    streaming.primary.sql("CREATE TABLE IF NOT EXISTS waited (id int)")
    streaming.primary.sql("INSERT INTO waited VALUES (1)")
    lsn = lsn_to_int(streaming.primary.value("SELECT pg_current_wal_insert_lsn()")) or 0
    streaming.wait_for_lsn(lsn, streaming.replicas[:1], kind=kind, timeout=10)
    state = streaming.topology().standbys["node1"]
    assert getattr(state, kind) >= lsn


def test_wait_for_lsn_rejects_unknown_kind(streaming: Cluster) -> None:
    with pytest.raises(PghaConfigError, match="invalid kind='applied': use write, flush or replay"):
        streaming.wait_for_lsn(0, kind="applied")


def test_wal_positions(streaming: Cluster) -> None:
    streaming.wait_for_replay()
    primary = streaming.primary.wal_positions()
    assert not primary.in_recovery
    assert primary.current is not None and primary.insert is not None
    assert primary.insert >= primary.current
    for replica in streaming.replicas:
        positions = replica.wal_positions()
        assert positions.in_recovery
        assert positions.current is None and positions.insert is None
        assert positions.received is not None and positions.replayed is not None
        assert positions.most_advanced >= positions.replayed
    assert lsn_to_int(int_to_lsn(primary.current)) == primary.current


def test_timeline_of_every_node(streaming: Cluster) -> None:
    assert [node.timeline() for node in streaming.nodes] == [1, 1, 1]


def test_multi_host_dsn_finds_the_primary(streaming: Cluster) -> None:
    with psycopg.connect(streaming.multi_host_dsn()) as conn:
        port = conn.execute("SELECT inet_server_port()").fetchone()
        assert port == (streaming.primary.port,)


def test_roles_and_dsn(streaming: Cluster) -> None:
    node = streaming.primary
    assert node.sql("SELECT current_user", user="app") == [("app",)]
    assert f"port={node.port}" in node.dsn()
    assert "user=postgres" in node.dsn()  # dsn(), connect() and sql(): the superuser
    with node.connect("monitor") as conn:
        assert conn.execute("SELECT pg_has_role('pg_monitor', 'member')").fetchone() == (True,)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(node.dsn("app", password="wrong"))


def test_servers_run_as_the_service_identity(streaming: Cluster) -> None:
    identity = service_identity()
    for node in streaming.nodes:
        assert node.pid is not None
        server = psutil.Process(node.pid)
        assert server.uids().real == identity.uid
        for child in server.children():
            assert child.uids().real == identity.uid
    if os.geteuid() == 0:
        assert identity.uid != 0 and identity.is_switched


def test_distinct_ports_and_directories(streaming: Cluster) -> None:
    assert len({node.port for node in streaming.nodes}) == 3
    assert len({node.datadir for node in streaming.nodes}) == 3
    assert all(node.datadir.parent == streaming.workdir for node in streaming.nodes)


def test_dynamic_shared_memory_goes_with_the_data_directory(streaming: Cluster) -> None:
    """POSIX segments would live in /dev/shm, and every immediate shutdown or crash
    (what teardown and fault tests do) would leak some there."""
    mapped: set[str] = set()
    for node in streaming.nodes:
        assert node.value("SHOW dynamic_shared_memory_type") == "mmap"
        assert node.pid is not None
        for proc in process_tree(node.pid):
            with contextlib.suppress(psutil.NoSuchProcess):  # a backend just ending
                mapped |= {m.path for m in proc.memory_maps() if "mmap." in m.path}
    assert mapped, "no dynamic shared memory segment mapped at all"
    assert all(Path(path).parent.name == "pg_dynshmem" for path in mapped)
    assert all(Path(path).parent.parent.parent == streaming.workdir for path in mapped)
