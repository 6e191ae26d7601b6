"""A template data directory, made once per run and per PostgreSQL version, that every
cluster of the run clones: initdb, roles with random passwords, the pgbench schema.

pytest-xdist workers share it: the first one to take the lock builds it, the others
wait and then read it. Cloning a cleanly shut down data directory is a valid base
backup for a standby, so a cluster starts with file copies instead of
initdb + pg_basebackup per node.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

import filelock
import psycopg
from psycopg.conninfo import make_conninfo

from pytest_pgha.cluster import conf
from pytest_pgha.cluster.binaries import PgBinaries
from pytest_pgha.cluster.postmaster import pid_file_status
from pytest_pgha.errors import ClusterError
from pytest_pgha.sandbox.context import SandboxContext
from pytest_pgha.sandbox.net import LOOPBACK
from pytest_pgha.sandbox.process import ManagedProcess
from pytest_pgha.sandbox.runas import Identity

WAL_SEGMENT_MB = 1


@dataclass(frozen=True)
class Credentials:
    """Passwords of the cluster's roles, random per run."""

    postgres: str
    app: str
    replicator: str
    monitor: str

    @classmethod
    def random(cls) -> Credentials:
        return cls(*(secrets.token_urlsafe(18) for _ in range(4)))

    def password(self, user: str) -> str:
        value = getattr(self, user, None)
        if not isinstance(value, str):
            raise KeyError(f"no role {user!r}: roles are postgres, app, replicator, monitor")
        return value


@dataclass(frozen=True)
class Template:
    datadir: Path
    binaries: PgBinaries
    credentials: Credentials
    scale: int
    setting_names: frozenset[str]


def run_as(
    identity: Identity, argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, what: str
) -> str:
    result = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        **identity.popen_kwargs(),
    )  # type: ignore[call-overload]
    if result.returncode != 0:
        raise ClusterError(
            f"{what} failed (exit {result.returncode}): {' '.join(argv)}\n"
            f"{result.stdout}{result.stderr}"
        )
    return str(result.stdout) + str(result.stderr)


def base_env() -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC"}


def ensure_template(context: SandboxContext, binaries: PgBinaries, scale: int) -> Template:
    # The bindir is part of the key: two builds of one version may differ (extensions,
    # compile options) and a template must match the binaries that run its clones.
    bindir_tag = hashlib.sha256(str(binaries.bindir).encode()).hexdigest()[:8]
    key = f"pg{binaries.version}-{bindir_tag}-s{scale}"
    home = context.run_dir / "templates" / key
    home.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(home) + ".lock", timeout=600):
        meta = home / "meta.json"
        if not meta.exists():
            _build(context, binaries, scale, home)
        data = json.loads(meta.read_text())
    return Template(
        home / "data",
        binaries,
        Credentials(**data["credentials"]),
        scale,
        frozenset(data["setting_names"]),
    )


def _build(context: SandboxContext, binaries: PgBinaries, scale: int, home: Path) -> None:
    identity = context.identity
    home.chmod(0o755)
    datadir = home / "data"
    shutil.rmtree(datadir, ignore_errors=True)
    datadir.mkdir(mode=0o700)
    identity.own(datadir)
    credentials = Credentials.random()
    pwfile = home / "pwfile"
    pwfile.write_text(credentials.postgres + "\n")
    identity.own(pwfile)
    try:
        run_as(
            identity,
            [
                binaries.program("initdb"),
                "-D",
                str(datadir),
                "-U",
                "postgres",
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--no-sync",
                "--no-instructions",
                "-E",
                "UTF8",
                "--locale=C",
                f"--wal-segsize={WAL_SEGMENT_MB}",
            ],
            cwd=home,
            env=base_env(),
            what="initdb",
        )
    finally:
        pwfile.unlink(missing_ok=True)
    conf.write_base_conf(datadir)
    port = context.ports.reserve("template")
    try:
        conf.write_node_conf(datadir, {"port": str(port), "min_wal_size": "4MB"})
        setting_names, redo_file = _populate(context, binaries, datadir, port, credentials, scale)
    finally:
        context.ports.release(port)
    os.unlink(datadir / conf.NODE_CONF)
    _drop_wal_before(datadir, redo_file)
    meta = {"credentials": asdict(credentials), "setting_names": sorted(setting_names)}
    (home / "meta.json.tmp").write_text(json.dumps(meta))
    (home / "meta.json.tmp").chmod(0o600)
    (home / "meta.json.tmp").rename(home / "meta.json")


def _populate(
    context: SandboxContext,
    binaries: PgBinaries,
    datadir: Path,
    port: int,
    credentials: Credentials,
    scale: int,
) -> tuple[set[str], str]:
    """Roles, database app, the pgbench schema; returns the setting names and the WAL
    file of the last checkpoint's redo point."""
    log = datadir.parent / "template.log"
    server = ManagedProcess(
        [binaries.program("postgres"), "-D", str(datadir)],
        label="template",
        log_path=log,
        identity=context.identity,
        registry=context.registry,
        env=base_env(),
        cwd=datadir,
    )
    server.start()
    try:
        wait_ready(datadir, server, timeout=60)
        conninfo = make_conninfo(
            host=LOOPBACK,
            port=str(port),
            user="postgres",
            dbname="postgres",
            password=credentials.postgres,
        )
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE app LOGIN PASSWORD '{credentials.app}'")
            admin.execute(
                f"CREATE ROLE replicator REPLICATION LOGIN PASSWORD '{credentials.replicator}'"
            )
            admin.execute(
                f"CREATE ROLE monitor LOGIN PASSWORD '{credentials.monitor}' IN ROLE pg_monitor"
            )
            admin.execute("CREATE DATABASE app OWNER app")
            names = {row[0] for row in admin.execute("SELECT name FROM pg_settings")}
        env = {**base_env(), "PGPASSWORD": credentials.app}
        pgbench = [
            binaries.program("pgbench"),
            "-i",
            "-q",
            "-s",
            str(scale),
            "-h",
            LOOPBACK,
            "-p",
            str(port),
            "-U",
            "app",
            "app",
        ]
        result = subprocess.run(pgbench, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ClusterError(f"pgbench -i failed: {result.stderr}")
        with psycopg.connect(conninfo, autocommit=True) as admin:
            # Two checkpoints: the second recycles the WAL the first made obsolete, so
            # every clone copies a few MB of WAL instead of all of pgbench -i's.
            admin.execute("SELECT pg_switch_wal()")
            admin.execute("CHECKPOINT")
            admin.execute("CHECKPOINT")
            row = admin.execute("SELECT redo_wal_file FROM pg_control_checkpoint()").fetchone()
    finally:
        server.stop(signal.SIGINT, timeout=30)  # SIGINT: fast shutdown
    assert row is not None
    return names, str(row[0])


def _drop_wal_before(datadir: Path, redo_file: str) -> None:
    """Every clone copies pg_wal three times per cluster: drop the segments before
    the redo point (the shutdown checkpoint's is later still), which neither crash
    recovery nor a starting standby ever reads. PostgreSQL keeps some of them after
    pgbench -i (12 MB on 15)."""
    for segment in (datadir / "pg_wal").iterdir():
        name = segment.name
        same_timeline = len(name) == 24 and name[:8] == redo_file[:8]
        if same_timeline and name < redo_file:
            segment.unlink()


def wait_ready(
    datadir: Path,
    process: ManagedProcess,
    *,
    timeout: float,
    accept: tuple[str, ...] = ("ready", "standby"),
) -> None:
    def ready() -> bool:
        status = pid_file_status(datadir)
        return bool(status and status[0] == process.pid and status[1] in accept)

    process.wait_until(
        ready,
        who=f"postgres in {datadir}",
        waiting_for="ready",
        timeout=timeout,
        interval=0.003,
        error=ClusterError,
    )
