"""What acts on a node's host: signal its postmaster, list and freeze its processes,
read its files, run a command as the service user. Local processes for now; a remote
implementation (SSH through testinfra) plugs in behind the same interface, and nothing
above a Node calls os.kill, psutil or open() on a node's files directly."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import psutil

from pytest_pgha.cluster.template import run_as
from pytest_pgha.sandbox.context import SandboxContext
from pytest_pgha.sandbox.net import LOOPBACK
from pytest_pgha.sandbox.pstree import process_tree, signal_inside, signal_tree


class NodeTransport(Protocol):
    """A node's host, as the harness acts on it."""

    @property
    def address(self) -> str:
        """Where clients reach the host's servers."""

    def processes(self, pid: int) -> list[int]:
        """pid and its living descendants, pid first; [] when pid is gone."""

    def kill(self, pids: Sequence[int], signum: int) -> int:
        """Signal each of pids at once, without waiting; how many were signalled."""

    def signal_tree(self, pid: int, signum: int) -> None:
        """Signal pid, then its descendants (SIGSTOP: once pid really stopped)."""

    def signal_inside(self, datadir: Path, signum: int) -> None:
        """Signal every process running in datadir (the orphans of a dead postmaster)."""

    def read_text(self, path: Path) -> str | None:
        """A file's text, or None when it does not exist."""

    def run(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], what: str) -> str:
        """Run a command as the service user; its output, or ClusterError naming `what`."""


class LocalTransport:
    """The node runs on this machine, as the sandbox's service user."""

    def __init__(self, context: SandboxContext, address: str = LOOPBACK) -> None:
        self._context = context
        self._address = address

    @property
    def address(self) -> str:
        return self._address

    def processes(self, pid: int) -> list[int]:
        return [p.pid for p in process_tree(pid)]

    def kill(self, pids: Sequence[int], signum: int) -> int:
        sent = 0
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError, psutil.Error):
                os.kill(pid, signum)
                sent += 1
        return sent

    def signal_tree(self, pid: int, signum: int) -> None:
        signal_tree(pid, signum)

    def signal_inside(self, datadir: Path, signum: int) -> None:
        signal_inside(datadir, signum)

    def read_text(self, path: Path) -> str | None:
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            return None

    def run(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], what: str) -> str:
        return run_as(self._context.identity, list(argv), cwd=cwd, env=dict(env), what=what)
