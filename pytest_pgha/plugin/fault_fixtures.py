"""Fault-proxy fixtures: one toxiproxy-server per test process, and links on the
replication path of every node of the test's cluster.

    def test_async_loses_commits(pgha_cluster, pgha_replication_links):
        for link in pgha_replication_links.values():
            link.latency(25)   # standbys trail by ~50 ms of round trip
"""

from __future__ import annotations

from collections.abc import Generator

import pytest
from psycopg.conninfo import conninfo_to_dict

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.node import Node
from pytest_pgha.faults.toxiproxy import INSTALL, Link, Toxiproxy, toxiproxy_binary
from pytest_pgha.poll import wait_until
from pytest_pgha.sandbox.context import SandboxContext
from pytest_pgha.scenarios.stack import Stack

STREAMING_TIMEOUT_S = 30.0


@pytest.fixture(scope="session")
def pgha_toxiproxy(pgha_sandbox: SandboxContext) -> Generator[Toxiproxy, None, None]:
    """A toxiproxy-server for this test process (each xdist worker has its own), on a
    reserved loopback port; stopped at the end of the session."""
    if toxiproxy_binary() is None:
        pytest.skip(f"toxiproxy-server is not installed: {INSTALL}")
    server = Toxiproxy(pgha_sandbox)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pgha_replication_links(
    pgha_cluster: Cluster, pgha_toxiproxy: Toxiproxy
) -> Generator[dict[str, Link], None, None]:
    """A toxiproxy link on the replication path of every node, by node name: each
    standby's primary_conninfo points at its link, which follows the node's upstream
    through failovers. At teardown the toxics go and the standbys connect directly
    again."""
    links = {
        node.name: pgha_toxiproxy.link(
            f"replication-{id(pgha_cluster):x}-{node.name}", node.host, node.port
        )
        for node in pgha_cluster.nodes
    }
    for node in pgha_cluster.nodes:
        node.replication_path = links[node.name]
    _repoint_standbys(pgha_cluster)
    try:
        yield links
    finally:
        for node in pgha_cluster.nodes:
            node.replication_path = None
        if all(node.running() for node in pgha_cluster.nodes):
            _repoint_standbys(pgha_cluster)
        for link in links.values():
            pgha_toxiproxy.remove_link(link.name)


SENDER_PORT_SQL = "SELECT sender_port FROM pg_stat_wal_receiver WHERE status = 'streaming'"


def _repoint_standbys(cluster: Cluster) -> None:
    """Reload each standby's primary_conninfo and wait until its WAL receiver streams
    through the new route (a reload restarts the receiver, PostgreSQL 13 and later)."""
    for node in cluster.replicas:
        upstream = node.upstream
        if upstream is None or not node.running():
            continue
        node.follow(upstream)
        path = node.replication_path
        port = path.route(upstream)[1] if path else upstream.port
        _await_sender_port(node, port)


def _await_sender_port(node: Node, port: int) -> None:
    wait_until(
        lambda: node.value(SENDER_PORT_SQL) == port,
        timeout=STREAMING_TIMEOUT_S,
        what=f"{node.name} to stream from port {port}",
    )


@pytest.fixture
def pgha_client_link(pgha_stack: Stack, pgha_toxiproxy: Toxiproxy) -> Generator[Link, None, None]:
    """A toxiproxy link between the application and the stack's write endpoint:
    durability trials connect through it, and a fault can reset or blackhole the
    connections in the middle of a COMMIT. A multi-host endpoint (the direct kind)
    is reached at the current primary."""
    host, port = _single_endpoint(pgha_stack)
    link = pgha_toxiproxy.link(f"client-{id(pgha_stack):x}", host, port)
    pgha_stack.client_path = link
    try:
        yield link
    finally:
        pgha_stack.client_path = None
        pgha_toxiproxy.remove_link(link.name)


def _single_endpoint(stack: Stack) -> tuple[str, int]:
    params = conninfo_to_dict(stack.proxy.rw_dsn)
    host, port = str(params.get("host", "")), str(params.get("port", ""))
    if "," in host or "," in port:
        primary = stack.cluster.primary
        return primary.host, primary.port
    return host, int(port)
