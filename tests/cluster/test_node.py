"""The node API: process control, state, logs; and teardown whatever a fault left."""

from __future__ import annotations

import signal
import time

import psutil
import pytest
from cluster_helpers import can_connect, count, eventually

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.errors import ClusterError, PghaConfigError
from pytest_pgha.sandbox.pstree import process_tree, processes_inside
from pytest_pgha.sandbox.sysv import _attached as attached
from pytest_pgha.sandbox.sysv import segment_of


def test_names_ports_and_pids(pair: Cluster) -> None:
    primary, replica = pair.nodes
    assert (primary.name, replica.name) == ("node0", "node1")
    assert pair.primary is primary and pair.replicas == [replica]
    assert pair.node("node1") is replica
    with pytest.raises(KeyError, match="no node 'node9'"):
        pair.node("node9")
    assert primary.pid != replica.pid
    assert primary.running() and replica.running()
    assert repr(primary) == f"<Node node0 port={primary.port}>"


@pytest.mark.parametrize("mode", ["smart", "fast", "immediate"])
def test_stop_and_start_a_replica(pair: Cluster, mode: str) -> None:
    replica = pair.replicas[0]
    old_pid = replica.pid
    replica.stop(mode)
    assert replica.pid is None and not replica.running()
    assert not can_connect(replica)
    pair.primary.sql("CREATE TABLE while_down (id int)")
    replica.start()
    assert replica.pid not in (None, old_pid)
    pair.wait_streaming([replica])
    pair.wait_for_replay()
    assert count(replica, "while_down") == 0


def test_restart_keeps_roles(pair: Cluster) -> None:
    primary, replica = pair.nodes
    primary.restart()
    replica.restart("immediate")
    assert not primary.is_in_recovery()
    assert replica.is_in_recovery()
    pair.wait_streaming([replica])


def test_kill_is_a_crash_and_start_recovers(pair: Cluster) -> None:
    primary = pair.primary
    primary.sql("CREATE TABLE durable (id int)")
    primary.sql("INSERT INTO durable SELECT generate_series(1, 10)")
    old_pid = primary.pid
    assert old_pid is not None
    primary.kill()
    assert primary.pid is None
    primary.start()  # crash recovery; the backends of the killed one are gone first
    assert count(primary, "durable") == 10
    assert "terminated by signal 9" in primary.logs() or "not properly shut down" in primary.logs()
    pair.wait_streaming(pair.replicas)


def test_crash_kills_every_process_listed_beforehand_at_once(pair: Cluster) -> None:
    primary = pair.primary
    session = primary.connect()  # a backend, which a postmaster-only kill would leave
    victims = primary.processes()
    assert victims[0] == primary.pid and len(victims) > 3
    processes = [psutil.Process(pid) for pid in victims]
    assert primary.crash(victims) == len(victims)
    psutil.wait_procs(processes, timeout=5)
    assert not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    session.close()
    with pytest.raises(ClusterError, match="not running"):
        primary.processes()
    primary.start()
    pair.wait_streaming(pair.replicas)


def test_freeze_and_thaw_with_named_signals(pair: Cluster) -> None:
    replica = pair.replicas[0]
    assert replica.pid is not None
    replica.signal("stop", whole_group=True)
    # Every process of the node, though each PostgreSQL child leads its own group.
    members = process_tree(replica.pid)
    assert len(members) >= 4  # postmaster, startup, walreceiver, checkpointer, ...
    # Signals are delivered asynchronously: stopped soon, not at once.
    eventually(
        lambda: {p.status() for p in members} == {psutil.STATUS_STOPPED}, "all to be stopped"
    )
    replica.signal("cont", whole_group=True)
    assert psutil.STATUS_STOPPED not in {p.status() for p in process_tree(replica.pid)}
    assert can_connect(replica)
    pair.wait_streaming([replica])


def test_stopping_a_frozen_node_does_not_wait_for_the_timeout(pair: Cluster) -> None:
    replica = pair.replicas[0]
    replica.freeze()
    started = time.monotonic()
    replica.stop("fast", timeout=20)
    assert time.monotonic() - started < 5
    assert replica.pid is None


def test_signal_kill_by_name(pair: Cluster) -> None:
    replica = pair.replicas[0]
    replica.signal("kill")
    eventually(lambda: not replica.running(), "the postmaster to die")
    with pytest.raises(ClusterError, match="node1 is not running"):
        replica.signal(signal.SIGTERM)


def test_teardown_after_kill_and_freeze_leaves_nothing(fresh: Cluster) -> None:
    """The fixture's teardown must survive any fault a test leaves behind."""
    primary, frozen, _ = fresh.nodes
    with primary.connect("app"):  # a backend the crash orphans
        primary.freeze()  # ... and freezes: it cannot even notice the crash
        segment = segment_of(primary.datadir)
        assert segment is not None
        primary.kill()
        frozen.freeze()
        assert processes_inside(primary.datadir)
        fresh.stop()
        assert all(not node.running() for node in fresh.nodes)
        assert processes_inside(fresh.workdir) == []
        assert attached(*segment) is None  # the crashed postmaster's SysV segment


def test_bad_stop_mode_and_signal_name(pair: Cluster) -> None:
    with pytest.raises(PghaConfigError, match="invalid mode='quick': use one of smart, fast"):
        pair.primary.stop("quick")
    with pytest.raises(PghaConfigError, match="invalid signal='freeze': use a number or one of"):
        pair.primary.signal("freeze")


def test_logs(pair: Cluster) -> None:
    replica = pair.replicas[0]
    replica.restart()
    assert "ready to accept read-only connections" in replica.logs()
    assert len(replica.logs(lines=2).splitlines()) <= 2
    assert replica.log_path.parent == pair.workdir


def test_start_twice_is_an_error(pair: Cluster) -> None:
    with pytest.raises(ClusterError, match="node0 is already running"):
        pair.primary.start()
