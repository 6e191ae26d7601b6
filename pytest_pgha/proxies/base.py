"""What every proxy adapter provides: a real proxy process in front of a cluster.

An adapter renders its configuration from `ProxySettings` (pure, unit-tested), starts
the real binary as the service user on loopback ports, exposes a read-write DSN (and a
read-only one when the proxy splits reads), rewires itself to a new primary (the
explicit path), and reports the writer's state for the sampler.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar, Literal

import psycopg
from psycopg.conninfo import make_conninfo

from pytest_pgha.errors import ProxyError
from pytest_pgha.lag import share_session_priority
from pytest_pgha.proxies.samples import ProxySample
from pytest_pgha.sandbox.context import SandboxContext
from pytest_pgha.sandbox.net import LOOPBACK
from pytest_pgha.sandbox.process import ManagedProcess, tail_log
from pytest_pgha.sandbox.sysv import release_orphaned_segments
from pytest_pgha.timeline import now_epoch_us

Role = Literal["primary", "replica"]


@dataclass(frozen=True)
class Backend:
    name: str
    host: str
    port: int
    role: Role

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ProxySettings:
    """Everything a proxy's configuration is rendered from."""

    workdir: Path
    listen_port: int
    admin_port: int
    backends: tuple[Backend, ...]
    app_password: str
    monitor_password: str
    admin_password: str = "admin"
    # A second listener for reads, where the proxy splits them (None: no read path).
    read_port: int | None = None
    # PostgreSQL client programs (psql) for health-check scripts.
    pg_bindir: Path | None = None
    database: str = "app"
    app_user: str = "app"
    monitor_user: str = "monitor"
    # Let the proxy find the primary by itself (ProxySQL read_only check, Pgpool
    # health check, HAProxy external check, PgDog role auto) instead of being rewired.
    monitor: bool = False
    # Adapter-specific overrides, e.g. {"server_login_retry": "0"} for PgBouncer.
    options: Mapping[str, str] = field(default_factory=dict)
    # Where the proxy listens (its client, admin and read ports).
    listen_host: str = LOOPBACK

    @property
    def primary(self) -> Backend:
        primaries = [b for b in self.backends if b.role == "primary"]
        if len(primaries) != 1:
            raise ProxyError(f"expected one primary backend, got {primaries}")
        return primaries[0]

    @property
    def replicas(self) -> tuple[Backend, ...]:
        return tuple(b for b in self.backends if b.role == "replica")

    def with_primary(self, name: str) -> ProxySettings:
        """The same settings after a failover: `name` is the primary, every other
        backend that is still listed is a replica."""
        backends = tuple(
            replace(b, role="primary" if b.name == name else "replica") for b in self.backends
        )
        return replace(self, backends=backends)

    def without(self, name: str) -> ProxySettings:
        return replace(self, backends=tuple(b for b in self.backends if b.name != name))


def find_program(
    name: str, extra_dirs: tuple[str, ...] = ("/usr/sbin", "/usr/local/bin", "/usr/local/sbin")
) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for directory in extra_dirs:
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def wait_listening(
    port: int, process: ManagedProcess, *, host: str = LOOPBACK, timeout: float = 15.0
) -> None:
    def listening() -> bool:
        with socket.socket() as sock:
            sock.settimeout(0.2)
            return sock.connect_ex((host, port)) == 0

    process.wait_until(
        listening,
        who=process.label,
        waiting_for=f"listening on {port}",
        timeout=timeout,
        interval=0.002,
        error=ProxyError,
    )


class Proxy(ABC):
    kind: ClassVar[str]
    program: ClassVar[str]
    install_hint: ClassVar[str]
    has_monitor: ClassVar[bool] = False
    splits_reads: ClassVar[bool] = False
    # A process of its own that can crash and restart (the direct baseline has none).
    has_process: ClassVar[bool] = True
    # The settings.options an adapter reads, when it reads a fixed set (None: it writes
    # every option into the proxy's own config file, which then checks the names).
    option_names: ClassVar[frozenset[str] | None] = None

    def __init__(self, settings: ProxySettings, context: SandboxContext, binary: str) -> None:
        self.settings = settings
        self.context = context
        self.binary = binary
        self.process: ManagedProcess | None = None

    # -- pure parts: unit-tested without a binary -------------------------------------
    @abstractmethod
    def render(self) -> dict[str, str]:
        """Configuration files, by name relative to the workdir."""

    @abstractmethod
    def argv(self) -> list[str]:
        """The command line that starts the proxy in the foreground."""

    # -- life cycle -------------------------------------------------------------------
    @classmethod
    def locate(cls) -> str | None:
        return find_program(cls.program)

    @property
    def log_path(self) -> Path:
        return self.settings.workdir / f"{self.kind}.log"

    def write_config(self) -> None:
        workdir = self.settings.workdir
        workdir.mkdir(parents=True, exist_ok=True)
        for name, text in self.render().items():
            path = workdir / name
            path.write_text(text)
            path.chmod(0o700 if text.startswith("#!") else 0o600)
        self.context.identity.own(workdir)

    def start(self, timeout: float = 15.0) -> None:
        self.write_config()
        self.process = ManagedProcess(
            self.argv(),
            label=self.kind,
            log_path=self.log_path,
            identity=self.context.identity,
            registry=self.context.registry,
            env=self.env(),
            cwd=self.settings.workdir,
        )
        self.process.start()
        if self.process.pid is not None:
            # Not starved by the harness's favoured clients (pytest_pgha.lag).
            share_session_priority(self.process.pid)
        wait_listening(self.settings.listen_port, self.process, timeout=timeout)
        self.after_start()
        self.wait_serving(timeout)

    def wait_serving(self, timeout: float) -> None:
        """Listening is not serving (Pgpool-II forks its children after it listens, a
        pooler may still log in to its backend): wait until a query through the
        read-write endpoint succeeds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.rw_dsn, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.Error as error:
                if time.monotonic() > deadline:
                    log = tail_log(self.log_path, 30)
                    raise ProxyError(
                        f"{self.kind} listens but serves no query after "
                        f"{timeout:.0f}s ({error}); its log:\n{log}"
                    ) from None
                time.sleep(0.01)

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

    def after_start(self) -> None:
        """Hook for adapters that configure themselves through an admin interface."""
        return

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(signal.SIGTERM, timeout=10)

    def kill(self) -> None:
        """SIGKILL, as a crash: no clean-up, no goodbye to the clients."""
        if self.process is None or not self.process.running():
            raise ProxyError(f"{self.kind} is not running")
        self.process.kill()

    def restart(self, timeout: float = 15.0) -> None:
        """Start again after a crash or a stop (the config on disk is reused)."""
        if self.process is not None and self.process.running():
            self.stop()
        if self.process is not None:
            self.process.stop(signal.SIGKILL, timeout=1)  # reap the crashed group
        self.start(timeout)
        # After the start, outside the restart window the scenario times.
        self.release_leftovers()

    def reconfigure(self, backends: tuple[Backend, ...], timeout: float = 15.0) -> None:
        """Start afresh in front of `backends` (a healed cluster): stop, forget what the
        proxy remembered about the old nodes, render the new configuration, start."""
        self.stop()
        if self.process is not None:
            self.process.stop(signal.SIGKILL, timeout=1)
        self.settings = replace(self.settings, backends=backends)
        self.forget_state()
        self.release_leftovers()
        self.start(timeout)

    def release_leftovers(self) -> int:
        """Shared memory a killed instance left (Pgpool-II's ~130 MB per start), once
        its processes are gone. Only under a dedicated service user, whose orphaned
        segments can only be the sandboxes'."""
        identity = self.context.identity
        if not identity.is_switched:
            return 0
        return release_orphaned_segments(identity.uid)

    def forget_state(self) -> None:
        """Hook: drop state the proxy keeps across restarts (none by default)."""
        return

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process and self.process.running() else None

    # -- the application's view ----------------------------------------------------------
    def dsn(self, port: int, **params: object) -> str:
        s = self.settings
        parts: dict[str, object] = {
            "host": s.listen_host,
            "port": port,
            "user": s.app_user,
            "dbname": s.database,
            "password": s.app_password,
            "connect_timeout": 3,
            **params,
        }
        return make_conninfo(**{k: str(v) for k, v in parts.items()})

    @property
    def rw_dsn(self) -> str:
        return self.dsn(self.settings.listen_port)

    @property
    def ro_dsn(self) -> str | None:
        return None

    # -- failover ------------------------------------------------------------------------
    @abstractmethod
    def rewire(self, new_primary: str) -> None:
        """Explicit path: route writes to the backend named new_primary (and drop the
        old primary from the writer role). Returns once the proxy accepted it."""

    @abstractmethod
    def sample(self) -> ProxySample:
        """The writer as the proxy sees it now (called every <= 100 ms by the sampler)."""

    def failed_sample(self) -> ProxySample:
        return ProxySample(now_epoch_us(), None, -1, -1)
