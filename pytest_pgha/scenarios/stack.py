"""A stack under test: a cluster, the proxy in front of it, and the test's timeline."""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.proxies.base import Backend, Proxy, ProxySettings
from pytest_pgha.sandbox.context import SandboxContext
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


def backends_of(cluster: Cluster) -> tuple[Backend, ...]:
    return tuple(
        Backend(n.name, "127.0.0.1", n.port, "primary" if n is cluster.primary else "replica")
        for n in cluster.nodes
    )


def proxy_settings(
    cluster: Cluster,
    sandbox: SandboxContext,
    kind: str,
    *,
    monitor: bool,
    options: dict[str, str] | None = None,
) -> tuple[ProxySettings, list[int]]:
    """Settings for a proxy of `kind` in front of `cluster`, with freshly reserved ports
    (returned so the caller releases them)."""
    ports = [sandbox.ports.reserve(f"{kind}-{role}") for role in ("listen", "admin", "read")]
    workdir = cluster.workdir / kind
    workdir.mkdir(exist_ok=True)
    settings = ProxySettings(
        workdir=workdir,
        listen_port=ports[0],
        admin_port=ports[1],
        read_port=ports[2],
        backends=backends_of(cluster),
        app_password=cluster.credentials.app,
        monitor_password=cluster.credentials.monitor,
        monitor=monitor,
        options=dict(options or {}),
        pg_bindir=cluster.binaries.bindir,
    )
    return settings, ports
