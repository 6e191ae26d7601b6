"""A stack under test: a cluster, the proxy in front of it, and the test's timeline."""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.proxies.base import Proxy
from pytest_pgha.proxies.cluster_settings import backends_of
from pytest_pgha.timeline import Timeline


@dataclass
class Stack:
    cluster: Cluster
    proxy: Proxy
    timeline: Timeline = field(default_factory=Timeline)

    @property
    def rw_dsn(self) -> str:
        return self.proxy.rw_dsn

    def heal(self) -> list[str]:
        """The stack at full strength again after a failover, for another trial: the
        lost nodes rejoin as standbys and the proxy starts afresh in front of the
        cluster as it is now. Returns the nodes that rejoined."""
        rejoined = self.cluster.heal()
        self.proxy.reconfigure(backends_of(self.cluster))
        return rejoined
