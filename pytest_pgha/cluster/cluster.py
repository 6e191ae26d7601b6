"""A sandboxed cluster: one primary and N streaming replicas cloned from the template."""

from __future__ import annotations

import difflib
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from psycopg.conninfo import make_conninfo

from pytest_pgha.cluster import conf
from pytest_pgha.cluster.lsn import lsn_to_int
from pytest_pgha.cluster.node import Node
from pytest_pgha.cluster.observer import ClusterObserver, Topology
from pytest_pgha.cluster.spec import SYNCHRONOUS_COMMIT_LEVELS, ClusterSpec, SyncMode, node_name
from pytest_pgha.cluster.template import Template
from pytest_pgha.errors import ClusterError, PghaConfigError
from pytest_pgha.poll import wait_until
from pytest_pgha.sandbox.context import SandboxContext


class Cluster:
    def __init__(
        self, spec: ClusterSpec, template: Template, context: SandboxContext, workdir: Path
    ) -> None:
        self.spec = spec
        self.template = template
        self.credentials = template.credentials
        self.binaries = template.binaries
        self.context = context
        self.workdir = workdir
        _check_setting_names(spec.settings, template.setting_names, self.binaries.version)
        self.nodes: list[Node] = []
        self.primary: Node
        # synchronous_standby_names as the cluster means it now (set_synchronous and
        # an HA manager's promotion change it); an HA manager carries it to the node it
        # promotes.
        self.sync_mode: SyncMode = spec.sync_mode()
        self._ports: list[int] = []
        # Reads the nodes this cluster launched; an observer can also wrap nodes that
        # something else started (an HA manager's, an existing cluster's).
        self.observer = ClusterObserver(lambda: self.nodes, lambda: self.primary)

    # -- life cycle -------------------------------------------------------------------
    def start(self) -> None:
        settings = {k: conf.conf_value(v) for k, v in self.spec.settings.items()}
        settings["synchronous_commit"] = self.spec.synchronous_commit
        for index in range(self.spec.replicas + 1):
            port = self.context.ports.reserve(node_name(index))
            self._ports.append(port)
            self.nodes.append(
                Node(
                    node_name(index),
                    self.workdir / node_name(index),
                    port,
                    binaries=self.binaries,
                    credentials=self.credentials,
                    context=self.context,
                    settings=settings,
                )
            )
        self.primary = self.nodes[0]
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            copies = [pool.submit(self._clone, node) for node in self.nodes]
            copies[0].result()
            self._start_primary()
            for copy in copies[1:]:
                copy.result()
        for replica in self.replicas:
            replica.configure_as_replica(self.primary)
            replica.launch()
        for replica in self.replicas:
            replica.wait_ready()
        self.wait_streaming(self.replicas, timeout=30)
        if self.spec.sync_mode().enabled:
            self.wait_synchronous(self.spec.sync_mode(), timeout=30)

    def _clone(self, node: Node) -> None:
        # cp -a keeps ownership and modes, and is faster than shutil for many files.
        argv = ["cp", "-a", str(self.template.datadir), str(node.datadir)]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ClusterError(f"cloning the template for {node.name} failed: {result.stderr}")
        node.clear_slots()

    def _start_primary(self) -> None:
        sync = self.spec.sync_mode()
        self.primary.write_conf(
            {"synchronous_standby_names": conf.quote(sync.to_guc())} if sync.enabled else None
        )
        self.primary.launch()
        self.primary.wait_ready()
        self.primary.sql(  # one statement: each session costs a SCRAM exchange
            "SELECT pg_create_physical_replication_slot(name, true)"
            " FROM unnest(%s::text[]) AS name",
            [[replica.name for replica in self.nodes[1:]]],
        )

    def stop(self) -> None:
        """Stop every node, whatever state a fault left it in; release the ports.
        One node failing to stop must not leave the others running."""
        try:
            with ThreadPoolExecutor(max_workers=max(1, len(self.nodes))) as pool:
                outcomes = [pool.submit(node.destroy) for node in self.nodes]
            errors = [f.exception() for f in outcomes if f.exception() is not None]
        finally:
            for port in self._ports:
                self.context.ports.release(port)
            self._ports.clear()
        if errors:
            raise ClusterError(f"stopping the cluster failed: {errors}")

    def remove(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- roles ---------------------------------------------------------------------
    @property
    def replicas(self) -> list[Node]:
        return [node for node in self.nodes if node is not self.primary]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r}; nodes are {[n.name for n in self.nodes]}")

    def promote(self, node: Node, *, kept: bool = False) -> None:
        """Promote node (through its kept session with kept=True) and make it the
        cluster's primary."""
        node.promote(kept=kept)
        self.primary = node

    def rejoin(self, node: Node, *, rewind: bool = True, timeout: float = 60.0) -> str:
        """Make node a streaming standby of the current primary (pg_rewind first when
        rewind is true); returns pg_rewind's output once the node streams."""
        output = node.rejoin(self.primary, rewind=rewind, timeout=timeout)
        self.wait_streaming([node], timeout=timeout)
        return output

    def heal(self, timeout: float = 60.0) -> list[str]:
        """Back to full strength after a failover: every standby that is not running
        (a fenced or stopped old primary) rejoins the current primary, pg_rewind first.
        Returns the names of the nodes that rejoined."""
        down = [node for node in self.replicas if not node.running()]
        for node in down:
            node.rejoin(self.primary, timeout=timeout)
        self.wait_streaming(self.replicas, timeout=timeout)
        if down and self.sync_mode.enabled:
            # An HA manager carried synchronous replication over the nodes it had; with
            # everyone back, every listed standby counts again.
            self.set_synchronous(self.sync_mode.to_guc(), timeout=timeout)
        return [node.name for node in down]

    def multi_host_dsn(
        self,
        user: str = "app",
        dbname: str = "app",
        target_session_attrs: str = "read-write",
        **params: object,
    ) -> str:
        """A libpq multi-host conninfo over every node: the no-proxy baseline."""
        hosts = ",".join(node.host for node in self.nodes)
        ports = ",".join(str(node.port) for node in self.nodes)
        parts = {
            "host": hosts,
            "port": ports,
            "user": user,
            "dbname": dbname,
            "password": self.credentials.password(user),
            "connect_timeout": 3,
            "target_session_attrs": target_session_attrs,
            **params,
        }
        return make_conninfo(**{k: str(v) for k, v in parts.items()})

    # -- observation (pytest_pgha.cluster.observer) -------------------------------------
    def topology(self) -> Topology:
        return self.observer.topology()

    def wait_streaming(self, standbys: Iterable[Node], timeout: float = 30) -> None:
        self.observer.wait_streaming(standbys, timeout)

    def wait_for_lsn(
        self,
        lsn: int,
        standbys: Sequence[Node] | None = None,
        *,
        kind: str = "replay",
        timeout: float = 30,
    ) -> None:
        self.observer.wait_for_lsn(lsn, standbys, kind=kind, timeout=timeout)

    def wait_for_replay(
        self, lsn: int | None = None, standbys: Sequence[Node] | None = None, timeout: float = 30
    ) -> None:
        self.observer.wait_for_replay(lsn, standbys, timeout)

    def wait_synchronous(self, mode: SyncMode, timeout: float = 30) -> None:
        self.observer.wait_synchronous(mode, timeout)

    def set_synchronous(
        self, synchronous: str, *, synchronous_commit: str | None = None, timeout: float = 30
    ) -> Topology:
        """The safe sequence from the synchronous-replication talk: change
        synchronous_standby_names, reload, wait until the server really uses the new
        value, take pg_current_wal_insert_lsn() and wait until the standbys flushed it
        (applied it for remote_apply). Only then do they count as synchronous."""
        replica_names = tuple(n.name for n in self.replicas)
        mode = SyncMode.parse(synchronous, replica_names)
        if synchronous_commit is not None and synchronous_commit not in SYNCHRONOUS_COMMIT_LEVELS:
            raise PghaConfigError.invalid(
                "synchronous_commit",
                synchronous_commit,
                f"use one of {', '.join(SYNCHRONOUS_COMMIT_LEVELS)}",
            )
        primary = self.primary
        primary.sql(f"ALTER SYSTEM SET synchronous_standby_names = {conf.quote(mode.to_guc())}")
        if synchronous_commit is not None:
            primary.sql(f"ALTER SYSTEM SET synchronous_commit = {conf.quote(synchronous_commit)}")
        primary.sql("SELECT pg_reload_conf()")
        # Reload is asynchronous: new sessions see the value once the postmaster read it.
        wait_until(
            lambda: (
                _normalised(primary.value("SHOW synchronous_standby_names"))
                == _normalised(mode.to_guc())
            ),
            timeout=timeout,
            what="synchronous_standby_names to take effect",
        )
        self.sync_mode = mode
        if not mode.enabled:
            return self.topology()
        # The walsenders count as synchronous first, then the LSN is taken: a commit
        # acknowledged before the backends began to wait lies before it, so once the
        # standbys have it every acknowledged commit is on them (Patroni's order).
        self.wait_synchronous(mode, timeout)
        lsn = lsn_to_int(primary.value("SELECT pg_current_wal_insert_lsn()")) or 0
        level = synchronous_commit or str(primary.value("SHOW synchronous_commit"))
        kind = {"remote_apply": "replay", "remote_write": "write"}.get(level, "flush")
        listed = [self.node(n) for n in mode.standbys]
        self.observer.wait_for_count(lsn, listed, mode.count, kind, timeout)
        return self.topology()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _check_setting_names(
    settings: Mapping[str, object], known: frozenset[str], version: str
) -> None:
    """Fail before anything starts on a misspelt setting; PostgreSQL itself would only
    say so in a server log. Names with a dot are extension placeholders: any is valid."""
    known_lower = {name.lower() for name in known}
    unknown = sorted(n for n in settings if "." not in n and n.lower() not in known_lower)
    if not unknown:
        return
    hints = [
        f"{name} -> {close[0]}"
        for name in unknown
        if (close := difflib.get_close_matches(name.lower(), known_lower, n=1))
    ]
    did_you_mean = f" (did you mean {', '.join(hints)}?)" if hints else ""
    raise PghaConfigError.invalid(
        "settings",
        unknown,
        f"PostgreSQL {version} has no such setting{did_you_mean}; "
        "fix the spelling (SELECT name FROM pg_settings lists them)",
    )


def _normalised(value: Any) -> str:
    return " ".join(str(value or "").replace('"', "").split()).lower()
