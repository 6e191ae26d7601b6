"""The faults themselves."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.node import Node, ReplicationPath
from pytest_pgha.proxies.base import Proxy
from pytest_pgha.timeline import INJECT, Event, Timeline


@dataclass(frozen=True)
class Fault:
    """What to do to the stack, and whether the primary is lost by it."""

    name: str
    loses_primary: bool
    planned: bool = False


def kill_primary(cluster: Cluster, timeline: Timeline) -> Event:
    """SIGKILL of the primary's postmaster and every process under it at once: the
    node crashed. (The failover lab's inject.sh kills the postmaster alone; its
    backends then notice only when they next wait, and on a busy runner they went on
    committing for a second, which the clients counted as writes resumed.)"""
    node = cluster.primary
    # Listed before the inject, killed right after it: walking /proc between the two
    # let the backends commit for 100 ms and more on a busy runner. The postmaster is
    # stopped while they are listed, so that it forks no backend the list would miss
    # (one that would go on committing, orphaned, on a node the HA manager thinks
    # dead). Without waiting for the kernel to reap them: the HA manager times its
    # detection from the inject.
    node.signal(signal.SIGSTOP)
    victims = node.processes()
    # The network goes first: a cut after the kill would let the WAL still in flight
    # (buffered by a latency toxic) reach the standbys.
    cut = cut_paths_from(cluster, node)
    event = timeline.record(INJECT, fault="kill_primary", node=node.name, pid=node.pid)
    node.crash(victims)
    if cut:
        timeline.record("replication_cut", standbys=cut)
    return event


def cut_paths_from(cluster: Cluster, upstream: Node) -> list[str]:
    """A crashed host takes its network with it: the WAL still in flight to its
    standbys never arrives. (A killed process alone does not: its kernel still sends
    what the socket holds.) Only where a replication path can be cut (a fault proxy
    on it); returns the standbys cut off."""
    paths = _paths_from(cluster, upstream)
    for path in paths.values():
        path.cut()
    return list(paths)


def mend_paths_from(cluster: Cluster, upstream: Node) -> list[str]:
    paths = _paths_from(cluster, upstream)
    for path in paths.values():
        path.mend()
    return list(paths)


def _paths_from(cluster: Cluster, upstream: Node) -> dict[str, ReplicationPath]:
    """The replication paths of upstream's standbys, by standby name."""
    return {
        node.name: node.replication_path
        for node in cluster.nodes
        if node.upstream is upstream and node.replication_path is not None
    }


def freeze_primary(cluster: Cluster, timeline: Timeline) -> Event:
    """SIGSTOP of every process of the primary: a hung host. TCP stays up, so only
    timeouts notice. `thaw` undoes it."""
    node = cluster.primary
    event = timeline.record(INJECT, fault="freeze_primary", node=node.name, pid=node.pid)
    node.freeze()
    return event


def thaw(node: Node, timeline: Timeline) -> Event:
    event = timeline.record("thaw", node=node.name)
    node.thaw()
    return event


def stop_primary(cluster: Cluster, timeline: Timeline) -> Event:
    """Fast shutdown, the first step of a planned switchover: the walsenders ship the
    remaining WAL to the standbys before the primary exits."""
    node = cluster.primary
    event = timeline.record(INJECT, fault="stop_primary", node=node.name, pid=node.pid)
    node.stop("fast")
    timeline.record("primary_stopped", node=node.name)
    return event


def kill_replica(cluster: Cluster, timeline: Timeline, name: str | None = None) -> Event:
    node = cluster.node(name) if name else cluster.replicas[0]
    event = timeline.record(INJECT, fault="kill_replica", node=node.name, pid=node.pid)
    node.kill()
    return event


def crash_proxy(proxy: Proxy, timeline: Timeline) -> Event:
    event = timeline.record(INJECT, fault="crash_proxy", proxy=proxy.kind, pid=proxy.pid)
    proxy.kill()
    return event


def restart_proxy(proxy: Proxy, timeline: Timeline) -> Event:
    timeline.record("proxy_restart_start", proxy=proxy.kind)
    proxy.restart()
    return timeline.record("proxy_restart_done", proxy=proxy.kind, pid=proxy.pid)


FAULTS: dict[str, tuple[Fault, Callable[[Cluster, Timeline], Event]]] = {
    "kill_primary": (Fault("kill_primary", loses_primary=True), kill_primary),
    "freeze_primary": (Fault("freeze_primary", loses_primary=True), freeze_primary),
    "stop_primary": (Fault("stop_primary", loses_primary=True, planned=True), stop_primary),
    "kill_replica": (Fault("kill_replica", loses_primary=False), kill_replica),
}
