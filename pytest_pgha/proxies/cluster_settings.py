"""A proxy's settings for a cluster: its backends, credentials and fresh ports."""

from __future__ import annotations

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.proxies.base import Backend, ProxySettings
from pytest_pgha.sandbox.context import SandboxContext


def backends_of(cluster: Cluster) -> tuple[Backend, ...]:
    return tuple(
        Backend(n.name, n.host, n.port, "primary" if n is cluster.primary else "replica")
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
