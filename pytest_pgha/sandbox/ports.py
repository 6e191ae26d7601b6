"""Loopback ports reserved safely across pytest-xdist workers and concurrent runs.

A port is ours when we could create its sentinel file with O_EXCL and bind it. The
range sits below Linux's ephemeral range so outgoing connections never take it.
"""

from __future__ import annotations

import errno
import os
import random
import socket
from pathlib import Path

from pytest_pgha.errors import PghaError
from pytest_pgha.sandbox.net import LOOPBACK

PORT_RANGE = range(20000, 32000)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


class PortPool:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def reserve(self, owner: str = "") -> int:
        for port in random.sample(PORT_RANGE, 400):
            sentinel = self.directory / str(port)
            try:
                fd = os.open(sentinel, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except OSError as error:
                if error.errno == errno.EEXIST:
                    continue
                raise
            with os.fdopen(fd, "w") as out:
                out.write(f"{os.getpid()} {owner}\n")
            if _bindable(port):
                return port
            sentinel.unlink()
        raise PghaError(
            f"no free loopback port in {PORT_RANGE.start}-{PORT_RANGE.stop} after 400 tries; "
            f"stale reservations may be left in {self.directory}: run `pgha cleanup`"
        )

    def release(self, port: int) -> None:
        (self.directory / str(port)).unlink(missing_ok=True)

    def reap(self) -> int:
        """Drop reservations whose owning process is gone."""
        reaped = 0
        for sentinel in self.directory.glob("*"):
            try:
                owner_pid = int(sentinel.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                owner_pid = 0
            if not _pid_alive(owner_pid):
                sentinel.unlink(missing_ok=True)
                reaped += 1
        return reaped


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
