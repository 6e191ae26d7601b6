"""Run server processes as an unprivileged user when pytest runs as root.

PostgreSQL refuses to start as root (and PgBouncer too), so as root every server
process runs as a system user created on first use; as a normal user nothing changes.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pytest_pgha.errors import PghaError

DEFAULT_SERVICE_USER = "pgha"


@dataclass(frozen=True)
class Identity:
    """Who server processes run as."""

    name: str
    uid: int
    gid: int

    @property
    def is_switched(self) -> bool:
        return self.uid != os.geteuid()

    def popen_kwargs(self) -> dict[str, object]:
        if not self.is_switched:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def own(self, path: Path) -> None:
        """Give path (and everything below it) to this identity."""
        if not self.is_switched:
            return
        os.chown(path, self.uid, self.gid)
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                os.chown(os.path.join(root, name), self.uid, self.gid, follow_symlinks=False)


def service_user_name() -> str:
    return os.environ.get("PGHA_SERVICE_USER", DEFAULT_SERVICE_USER)


@functools.cache
def service_identity() -> Identity:
    """The identity server processes run as; creates the system user as root."""
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return Identity(entry.pw_name, entry.pw_uid, entry.pw_gid)
    name = service_user_name()
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        _create_system_user(name)
        entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise PghaError(f"PGHA_SERVICE_USER={name!r} is root; PostgreSQL refuses to run as root")
    return Identity(name, entry.pw_uid, entry.pw_gid)


def _create_system_user(name: str) -> None:
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    command = [
        useradd,
        "--system",
        "--user-group",
        "--no-create-home",
        "--home-dir",
        "/nonexistent",
        "--shell",
        "/usr/sbin/nologin",
        name,
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    # Another xdist worker may have created it between our lookup and useradd.
    if result.returncode not in (0, 9):
        raise PghaError(
            f"could not create the unprivileged user {name!r} that runs PostgreSQL as root: "
            f"{result.stderr.strip()}. Fix: create it (useradd --system {name}) or run "
            "pytest as a normal user."
        )
