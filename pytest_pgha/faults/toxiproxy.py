"""toxiproxy, the TCP fault proxy (Shopify/toxiproxy), between the parts of a stack.

A real toxiproxy-server runs per test process; the harness drives it through its HTTP
API ("toxiproxy: API" in its README: POST /proxies, POST /proxies/{name}/toxics, ...),
a few calls that need no client library. A `Link` is one of its proxies: a listener
that forwards to an upstream, on which toxics act: latency (+ jitter), timeout (a
blackhole: data is dropped and the connection closed after the timeout, or never when
0), reset_peer (a TCP RST), bandwidth.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from pytest_pgha.cluster.node import Node
from pytest_pgha.errors import PghaError
from pytest_pgha.poll import wait_until
from pytest_pgha.sandbox.context import SandboxContext
from pytest_pgha.sandbox.net import LOOPBACK
from pytest_pgha.sandbox.process import ManagedProcess

BINARY = "toxiproxy-server"
INSTALL = (
    "go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0 and install the "
    "binary (named `server`) as toxiproxy-server on PATH, or run .ci/install"
)
TOXIC_TYPES = ("latency", "timeout", "reset_peer", "bandwidth", "slow_close", "limit_data")
API_TIMEOUT_S = 5.0


class ToxiproxyError(PghaError):
    pass


def toxiproxy_binary() -> str | None:
    return shutil.which(BINARY)


class Toxiproxy:
    """One toxiproxy-server on a reserved loopback port, run as the service user."""

    def __init__(self, context: SandboxContext, binary: str | None = None) -> None:
        found = binary or toxiproxy_binary()
        if found is None:
            raise ToxiproxyError(f"{BINARY} is not installed: {INSTALL}")
        self.context = context
        self.binary = found
        self.api_port = context.ports.reserve("toxiproxy")
        self.workdir = context.test_dir("toxiproxy")
        self.process: ManagedProcess | None = None
        self.links: dict[str, Link] = {}

    def start(self, timeout: float = 15.0) -> None:
        self.process = ManagedProcess(
            [self.binary, "-host", LOOPBACK, "-port", str(self.api_port)],
            label="toxiproxy",
            log_path=self.workdir / "toxiproxy.log",
            identity=self.context.identity,
            registry=self.context.registry,
            cwd=self.workdir,
        )
        self.process.start()
        wait_until(
            self._answers, timeout=timeout, what="toxiproxy's API to answer", error=ToxiproxyError
        )

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
        for link in self.links.values():
            self.context.ports.release(link.listen_port)
        self.links.clear()
        self.context.ports.release(self.api_port)

    def _answers(self) -> bool:
        try:
            self.api("GET", "/version")
        except ToxiproxyError:
            return False
        return True

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"http://{LOOPBACK}:{self.api_port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=API_TIMEOUT_S) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as error:
            raise ToxiproxyError(
                f"toxiproxy {method} {path}: {error.code} {error.read().decode().strip()}"
            ) from None
        except OSError as error:
            raise ToxiproxyError(f"toxiproxy {method} {path}: {error}") from None
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text

    def link(self, name: str, upstream_host: str, upstream_port: int) -> Link:
        """A listener on a reserved loopback port forwarding to the upstream (created,
        or retargeted when it exists)."""
        existing = self.links.get(name)
        if existing is not None:
            existing.retarget(upstream_host, upstream_port)
            return existing
        port = self.context.ports.reserve(f"toxiproxy-{name}")
        self.api(
            "POST",
            "/proxies",
            {
                "name": name,
                "listen": f"{LOOPBACK}:{port}",
                "upstream": f"{upstream_host}:{upstream_port}",
                "enabled": True,
            },
        )
        link = Link(self, name, port, (upstream_host, upstream_port))
        self.links[name] = link
        return link

    def remove_link(self, name: str) -> None:
        link = self.links.pop(name, None)
        if link is None:
            return
        self.api("DELETE", f"/proxies/{name}")
        self.context.ports.release(link.listen_port)

    def heal(self) -> None:
        """Every link enabled, every toxic removed (toxiproxy's POST /reset)."""
        self.api("POST", "/reset")
        for link in self.links.values():
            link.toxics.clear()


@dataclass
class Link:
    """One toxiproxy proxy: clients connect to listen_port, toxiproxy forwards."""

    server: Toxiproxy
    name: str
    listen_port: int
    upstream: tuple[str, int]
    toxics: set[str] = field(default_factory=set)

    @property
    def address(self) -> tuple[str, int]:
        return (LOOPBACK, self.listen_port)

    def retarget(self, host: str, port: int) -> None:
        """Forward to another upstream (toxiproxy restarts the proxy: open
        connections through it close). A cut does not follow: the new upstream is
        another host."""
        if (host, port) == self.upstream:
            return
        self.mend()
        self.server.api("POST", f"/proxies/{self.name}", {"upstream": f"{host}:{port}"})
        self.upstream = (host, port)

    def add_toxic(
        self,
        kind: str,
        *,
        stream: str = "downstream",
        toxicity: float = 1.0,
        name: str | None = None,
        **attributes: int | float,
    ) -> str:
        """Add a toxic: latency (latency, jitter in ms), timeout (timeout ms, 0 = never
        close), reset_peer (timeout ms before the RST), bandwidth (rate KB/s), ... on
        the downstream (server to client) or upstream stream. Returns its name."""
        if kind not in TOXIC_TYPES:
            raise ToxiproxyError(f"unknown toxic {kind!r}: use one of {', '.join(TOXIC_TYPES)}")
        if stream not in ("downstream", "upstream"):
            raise ToxiproxyError(f"stream {stream!r}: use 'downstream' or 'upstream'")
        toxic = name or f"{kind}_{stream}"
        self.server.api(
            "POST",
            f"/proxies/{self.name}/toxics",
            {
                "name": toxic,
                "type": kind,
                "stream": stream,
                "toxicity": toxicity,
                "attributes": attributes,
            },
        )
        self.toxics.add(toxic)
        return toxic

    def latency(self, ms: int, jitter_ms: int = 0) -> None:
        """Delay both directions by ms (± jitter): a round trip of 2 * ms."""
        for stream in ("downstream", "upstream"):
            self.add_toxic("latency", stream=stream, latency=ms, jitter=jitter_ms)

    def remove_toxic(self, name: str) -> None:
        self.server.api("DELETE", f"/proxies/{self.name}/toxics/{name}")
        self.toxics.discard(name)

    def clear(self) -> None:
        for toxic in list(self.toxics):
            self.remove_toxic(toxic)

    # -- as a node's replication path (pytest_pgha.cluster.node.ReplicationPath) -----
    def route(self, upstream: Node) -> tuple[str, int]:
        """A standby (re)configured to stream from upstream: a cut left from an earlier
        role of the node (a standby cut off when its primary died, promoted since) is
        stale, whatever the upstream."""
        self.retarget(upstream.host, upstream.port)
        self.mend()
        return self.address

    def cut(self) -> None:
        """A blackhole both ways (timeout toxics of 0: data dropped, connections kept
        open, as a partition looks). Data already inside the link, delayed by a
        latency toxic, is dropped too: what was in flight when a host died."""
        for stream in ("downstream", "upstream"):
            if f"cut_{stream}" not in self.toxics:
                self.add_toxic("timeout", stream=stream, name=f"cut_{stream}", timeout=0)

    def mend(self) -> None:
        """Undo cut(). The connections it kept open lost bytes in the middle of the
        stream: they are closed (the link disabled and enabled again), so that the
        standby reconnects at once instead of after wal_receiver_timeout."""
        if not self.is_cut:
            return
        for stream in ("downstream", "upstream"):
            if f"cut_{stream}" in self.toxics:
                self.remove_toxic(f"cut_{stream}")
        self.set_enabled(False)
        self.set_enabled(True)

    @property
    def is_cut(self) -> bool:
        return "cut_downstream" in self.toxics

    def set_enabled(self, enabled: bool) -> None:
        """Disabled, the link refuses connections and closes the open ones: a cut."""
        self.server.api("POST", f"/proxies/{self.name}", {"enabled": enabled})
