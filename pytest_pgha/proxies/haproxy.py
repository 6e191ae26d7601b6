"""HAProxy in TCP mode. Explicit path: one `writer` server retargeted through the
runtime API (`set server ... addr`). Monitor path: every node is a server whose
external check asks `pg_is_in_recovery()`, so only the primary is UP."""

from __future__ import annotations

import csv
import io
import socket
from typing import ClassVar

from pytest_pgha.errors import ProxyError
from pytest_pgha.proxies.base import Proxy
from pytest_pgha.proxies.samples import ProxySample
from pytest_pgha.timeline import now_epoch_us

RW, RO = "pg_rw", "pg_ro"
CHECK_SCRIPT = "pg-is-primary.sh"
# HAProxy waits min(timeout connect, 1 s) before each retry of a failed server
# connect, and by default retries 3 times on the same server: a client reconnecting
# during the outage would sit there for 3 s. These defaults fail over like an operator
# tuning for it would: a short turn-around and a redispatch on retry.
DEFAULTS = {"check_inter_ms": "200", "timeout_connect": "250ms", "retries": "1"}


class HAProxyProxy(Proxy):
    kind: ClassVar[str] = "haproxy"
    program: ClassVar[str] = "haproxy"
    install_hint: ClassVar[str] = "apt-get install haproxy"
    has_monitor: ClassVar[bool] = True
    splits_reads: ClassVar[bool] = True
    option_names: ClassVar[frozenset[str] | None] = frozenset(DEFAULTS)

    def _option(self, key: str) -> str:
        return self.settings.options.get(key, DEFAULTS[key])

    def render(self) -> dict[str, str]:
        files = {"haproxy.cfg": self._config()}
        if self.settings.monitor:
            files[CHECK_SCRIPT] = self._check_script()
        return files

    def _config(self) -> str:
        s = self.settings
        lines = [
            "global",
            "    maxconn 2000",
            # TCP, not a unix socket: sandbox paths can exceed sun_path's 107 bytes.
            f"    stats socket ipv4@{s.listen_host}:{s.admin_port} level admin",
            # To the proxy's log file instead of syslog: server state changes and
            # errors, the proxy's side of the failover's timeline.
            "    log stderr format iso local0 notice",
        ]
        if s.monitor:
            lines += ["    external-check", "    insecure-fork-wanted"]
        lines += [
            "",
            "defaults",
            "    mode tcp",
            "    log global",
            f"    timeout connect {self._option('timeout_connect')}",
            f"    retries {self._option('retries')}",
            "    option redispatch",
            "    timeout client 1h",
            "    timeout server 1h",
            "    timeout check 1s",
            "",
            f"listen {RW}",
            f"    bind {s.listen_host}:{s.listen_port}",
        ]
        lines += self._rw_servers()
        if s.read_port is not None and s.replicas:
            lines += [
                "",
                f"listen {RO}",
                f"    bind {s.listen_host}:{s.read_port}",
                "    balance roundrobin",
                f"    default-server inter {self._option('check_inter_ms')} fall 1 rise 1",
            ]
            lines += [f"    server {b.name} {b.address} check" for b in s.replicas]
        return "\n".join(lines) + "\n"

    def _rw_servers(self) -> list[str]:
        s = self.settings
        if not s.monitor:
            return [f"    server writer {s.primary.address}"]
        return [
            "    option external-check",
            f"    external-check command {s.workdir / CHECK_SCRIPT}",
            '    external-check path "/usr/bin:/bin"',
            f"    default-server inter {self._option('check_inter_ms')} fall 1 rise 1 "
            "on-marked-down shutdown-sessions",
            *(f"    server {b.name} {b.address} check" for b in s.backends),
        ]

    def _check_script(self) -> str:
        s = self.settings
        if s.pg_bindir is None:
            raise ProxyError("the HAProxy monitor path needs settings.pg_bindir (for psql)")
        psql = s.pg_bindir / "psql"
        # HAProxy passes: proxy address, proxy port, server address, server port.
        return (
            "#!/bin/sh\n"
            f"PGPASSWORD='{s.monitor_password}' PGCONNECT_TIMEOUT=2 '{psql}' -h \"$3\" "
            f'-p "$4" -U {s.monitor_user} -d {s.database} -XAtqc '
            "'select pg_is_in_recovery()' 2>/dev/null | grep -qx f\n"
        )

    def argv(self) -> list[str]:
        return [self.binary, "-db", "-f", str(self.settings.workdir / "haproxy.cfg")]

    @property
    def ro_dsn(self) -> str | None:
        if self.settings.read_port is None or not self.settings.replicas:
            return None
        return self.dsn(self.settings.read_port)

    def runtime(self, command: str) -> str:
        """One command on the runtime API (the stats socket)."""
        address = (self.settings.listen_host, self.settings.admin_port)
        with socket.create_connection(address, timeout=2) as sock:
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def rewire(self, new_primary: str) -> None:
        if self.settings.monitor:
            return  # the external check finds the new primary by itself
        target = next(b for b in self.settings.backends if b.name == new_primary)
        answer = self.runtime(f"set server {RW}/writer addr {target.host} port {target.port}")
        if "changed" not in answer and "no need to change" not in answer:
            raise ProxyError(f"HAProxy refused to retarget the writer: {answer.strip()}")
        self.runtime(f"shutdown sessions server {RW}/writer")

    def stats(self) -> list[dict[str, str]]:
        text = self.runtime("show stat").lstrip("# ")
        return list(csv.DictReader(io.StringIO(text)))

    def sample(self) -> ProxySample:
        rows = [
            r
            for r in self.stats()
            if r.get("pxname") == RW and r.get("svname") not in ("FRONTEND", "BACKEND")
        ]
        up = [r for r in rows if (r.get("status") or "").startswith(("UP", "no check"))]
        writer = up[0] if up else None
        sessions = sum(int(r.get("scur") or 0) for r in rows)
        address = writer.get("addr") if writer else None
        return ProxySample(now_epoch_us(), address, 1 if writer else 0, sessions)
