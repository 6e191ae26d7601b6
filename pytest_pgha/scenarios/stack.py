"""A stack under test: a cluster, the proxy in front of it, and the test's timeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from psycopg.conninfo import make_conninfo

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.proxies.base import Proxy
from pytest_pgha.proxies.cluster_settings import backends_of
from pytest_pgha.timeline import Timeline


class ClientPath(Protocol):
    @property
    def address(self) -> tuple[str, int]:
        """Where the application connects instead of the stack's endpoint."""


@dataclass
class Stack:
    cluster: Cluster
    proxy: Proxy
    timeline: Timeline = field(default_factory=Timeline)
    # A fault proxy between the application and the stack's endpoint (a toxiproxy
    # link), when a test put one there: durability trials connect through it.
    client_path: ClientPath | None = None

    @property
    def rw_dsn(self) -> str:
        """Where the application connects for writes: through the client path if any."""
        dsn = self.proxy.rw_dsn
        if self.client_path is None:
            return dsn
        host, port = self.client_path.address
        return make_conninfo(dsn, host=host, port=str(port))

    def heal(self) -> list[str]:
        """The stack at full strength again after a failover, for another trial: the
        lost nodes rejoin as standbys and the proxy starts afresh in front of the
        cluster as it is now. Returns the nodes that rejoined."""
        rejoined = self.cluster.heal()
        self.proxy.reconfigure(backends_of(self.cluster))
        return rejoined
