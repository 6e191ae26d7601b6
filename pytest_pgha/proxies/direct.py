"""No proxy: libpq multi-host with target_session_attrs=read-write, the bare
PostgreSQL baseline. Clients find the new primary by themselves on reconnect."""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

import psycopg
from psycopg.conninfo import make_conninfo

from pytest_pgha.cluster.probe import postmaster_answers
from pytest_pgha.proxies.base import Backend, Proxy
from pytest_pgha.proxies.samples import ProxySample
from pytest_pgha.timeline import now_epoch_us


class DirectProxy(Proxy):
    kind: ClassVar[str] = "direct"
    program: ClassVar[str] = ""
    install_hint: ClassVar[str] = "nothing to install: libpq comes with psycopg"
    has_monitor: ClassVar[bool] = True  # target_session_attrs is the client's own check
    splits_reads: ClassVar[bool] = True
    has_process: ClassVar[bool] = False
    _probes: dict[str, psycopg.Connection[Any]]

    @classmethod
    def locate(cls) -> str | None:
        return "libpq"

    def render(self) -> dict[str, str]:
        return {}

    def argv(self) -> list[str]:
        return []

    def start(self, timeout: float = 15.0) -> None:
        self._probes = {}

    def stop(self) -> None:
        for conn in getattr(self, "_probes", {}).values():
            conn.close()
        self._probes = {}

    def kill(self) -> None:
        raise NotImplementedError("there is no proxy process to kill in the direct baseline")

    def _multi_host(self, attrs: str) -> str:
        s = self.settings
        hosts = ",".join(b.host for b in s.backends)
        ports = ",".join(str(b.port) for b in s.backends)
        return make_conninfo(
            host=hosts,
            port=ports,
            user=s.app_user,
            dbname=s.database,
            password=s.app_password,
            connect_timeout="3",
            target_session_attrs=attrs,
        )

    @property
    def rw_dsn(self) -> str:
        return self._multi_host("read-write")

    @property
    def ro_dsn(self) -> str | None:
        return self._multi_host("prefer-standby")

    def rewire(self, new_primary: str) -> None:
        """Nothing to tell: clients discover the primary when they reconnect."""
        return

    def _probe(self, backend: Backend) -> psycopg.Connection[Any]:
        conn = self._probes.get(backend.name)
        if conn is None or conn.closed or conn.broken:
            s = self.settings
            conn = psycopg.connect(
                host=backend.host,
                port=backend.port,
                user=s.monitor_user,
                password=s.monitor_password,
                dbname=s.database,
                connect_timeout=2,
                autocommit=True,
            )
            self._probes[backend.name] = conn
        return conn

    def sample(self) -> ProxySample:
        for backend in self.settings.backends:
            # A frozen node would hang the query below: ask its postmaster first.
            if not postmaster_answers(backend.host, backend.port, timeout=0.05):
                continue
            try:
                conn = self._probe(backend)
                row = conn.execute(
                    "SELECT pg_is_in_recovery(), count(*) FILTER (WHERE state = 'active' AND "
                    "usename = %s) FROM pg_stat_activity",
                    [self.settings.app_user],
                ).fetchone()
            except psycopg.Error:
                with contextlib.suppress(KeyError):
                    self._probes.pop(backend.name).close()
                continue
            if row is not None and row[0] is False:
                return ProxySample(now_epoch_us(), backend.address, 1, int(row[1]))
        return ProxySample(now_epoch_us(), None, 0, 0)
