"""The sandbox of one run: a base directory shared by runs, a directory per run."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.sandbox.ports import PortPool
from pytest_pgha.sandbox.registry import ReapReport, Registry
from pytest_pgha.sandbox.runas import Identity, service_identity
from pytest_pgha.sandbox.sysv import release_orphaned_segments

# Memory-backed when the machine has it: cloning data directories is then a memcpy,
# and fsync=off makes the disk irrelevant to what the tests measure.
SHM_BASE_DIR = Path("/dev/shm/pgha")
DISK_BASE_DIR = Path("/tmp/pgha")


def default_base_dir() -> Path:
    if "PGHA_BASEDIR" in os.environ:
        return Path(os.environ["PGHA_BASEDIR"])
    shm = SHM_BASE_DIR.parent
    return SHM_BASE_DIR if shm.is_dir() and os.access(shm, os.W_OK) else DISK_BASE_DIR


@dataclass(frozen=True)
class SandboxContext:
    """Everything a cluster or proxy needs from the run: where to live, who to run as."""

    base_dir: Path
    run_dir: Path
    identity: Identity
    registry: Registry
    ports: PortPool

    @property
    def cache_dir(self) -> Path:
        return self.base_dir / "cache"

    def test_dir(self, name: str) -> Path:
        """A fresh directory for one test, owned by the service user."""
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name)[-60:].strip("-") or "test"
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        parent = self.run_dir / worker
        parent.mkdir(parents=True, exist_ok=True)
        parent.chmod(0o755)
        for attempt in range(1000):
            path = parent / (slug if attempt == 0 else f"{slug}-{attempt}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            path.chmod(0o755)
            self.identity.own(path)
            return path
        raise RuntimeError(f"cannot create a test directory under {parent}")


def check_reachable(base_dir: Path, identity: Identity) -> None:
    """The service user must be able to walk down to the sandboxes."""
    if not identity.is_switched:
        return
    for parent in base_dir.parents:
        if parent.exists() and not parent.stat().st_mode & 0o001:
            raise PghaConfigError.invalid(
                "--pgha-basedir",
                str(base_dir),
                f"{parent} is not searchable by others, so the unprivileged user "
                f"{identity.name!r} that runs PostgreSQL cannot reach it; choose a directory "
                "under /dev/shm or /tmp (the default is /dev/shm/pgha)",
            )


def open_sandbox(base_dir: Path, run_id: str, *, own_run_dir: bool = False) -> SandboxContext:
    """The sandbox of run run_id under base_dir. With own_run_dir, this process
    registers the run directory as its own (a script such as the benchmark): if it is
    killed, the next run or `pgha cleanup` removes it. The pytest plugin's controller
    registers it itself, so that xdist workers do not remove it as they finish."""
    base_dir = base_dir.resolve()
    identity = service_identity()
    check_reachable(base_dir, identity)
    base_dir.mkdir(parents=True, exist_ok=True)
    base_dir.chmod(0o755)
    run_dir = base_dir / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir.chmod(0o755)
    registry = Registry(base_dir / "registry")
    if own_run_dir:
        registry.add_directory(run_dir)
    return SandboxContext(
        base_dir,
        run_dir,
        identity,
        registry,
        PortPool(base_dir / "ports"),
    )


def reap_orphans(base_dir: Path, *, everything: bool = False, kept: bool = False) -> ReapReport:
    """What runs killed with SIGKILL left behind: processes, run directories, ports;
    the directories of runs started with --pgha-keep only with kept=True."""
    report = Registry(base_dir / "registry").reap(everything=everything, kept=kept)
    PortPool(base_dir / "ports").reap()
    identity = service_identity()
    if identity.is_switched:
        release_orphaned_segments(identity.uid)
    return report
