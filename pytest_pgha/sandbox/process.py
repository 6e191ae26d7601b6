"""A server process of the stack: started as the service identity in its own process
group, logged to a file, registered so that nothing outlives the run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil

from pytest_pgha.sandbox.pstree import kill_tree, process_tree
from pytest_pgha.sandbox.registry import Registry, kill_process_group
from pytest_pgha.sandbox.runas import Identity


class ManagedProcess:
    def __init__(
        self,
        argv: Sequence[str],
        *,
        label: str,
        log_path: Path,
        identity: Identity,
        registry: Registry,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self.label = label
        self.log_path = log_path
        self._identity = identity
        self._registry = registry
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None
        self._token: Path | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            # A new session: Ctrl-C in the terminal reaches pytest, which stops us in
            # order. (PostgreSQL's children make sessions of their own: see pstree.)
            self._popen = subprocess.Popen(  # type: ignore[call-overload]
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,
                **self._identity.popen_kwargs(),
            )
        self._token = self._registry.add_process(self.pid, self.label)

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"{self.label} was never started")
        return self._popen.pid

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def returncode(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def wait_until(
        self,
        ready: Callable[[], bool],
        *,
        who: str,
        waiting_for: str,
        timeout: float,
        interval: float,
        error: type[Exception],
    ) -> None:
        """Poll ready() until it holds. If the process exits first, or timeout passes,
        raise error naming `who`, with the end of the process's log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if not self.running():
                raise error(
                    f"{who} exited with code {self.returncode()} while starting; its log "
                    f"ends with:\n{tail_log(self.log_path, 30)}"
                )
            time.sleep(interval)
        raise error(
            f"{who} not {waiting_for} after {timeout:.0f}s; its log:\n{tail_log(self.log_path, 30)}"
        )

    def send_signal(self, signum: int) -> None:
        if self.running():
            os.kill(self.pid, signum)

    def wait(self, timeout: float) -> int | None:
        if self._popen is None:
            return None
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Ask politely, then SIGKILL the leader and its descendants; always unregister."""
        if self._popen is not None:
            if self.running():
                self.send_signal(signum)
                if self.wait(timeout) is None:
                    kill_tree(self.pid)  # before the leader dies: then they are orphans
                    self.wait(5.0)
            kill_process_group(self.pid)
        self.forget()

    def descendants(self) -> list[psutil.Process]:
        return process_tree(self.pid)[1:] if self.running() else []

    def kill(self) -> None:
        """SIGKILL the leader only, as a crash would: its children notice by themselves."""
        self.send_signal(signal.SIGKILL)
        self.wait(5.0)

    def forget(self) -> None:
        if self._token is not None:
            with contextlib.suppress(OSError):
                self._registry.remove(self._token)
            self._token = None


def tail_log(path: Path, lines: int = 20) -> str:
    """The last lines of a process's log, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
