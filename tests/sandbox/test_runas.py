"""Who server processes run as: the service user as root, oneself otherwise."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest

from pytest_pgha.errors import PghaError
from pytest_pgha.sandbox.process import ManagedProcess
from pytest_pgha.sandbox.registry import Registry
from pytest_pgha.sandbox.runas import Identity, service_identity

pytestmark = pytest.mark.usefixtures("fresh_identity")


def _passwd(name: str, uid: int, gid: int) -> pwd.struct_passwd:
    return pwd.struct_passwd((name, "x", uid, gid, "", "/nonexistent", "/usr/sbin/nologin"))


@pytest.fixture
def chowns(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    calls: list[tuple[str, int, int]] = []
    monkeypatch.setattr(os, "chown", lambda path, uid, gid, **_: calls.append((path, uid, gid)))
    return calls


def test_a_normal_user_runs_servers_as_itself(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, chowns: list[tuple[str, int, int]]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: _passwd("alice", uid, 1000))
    monkeypatch.setattr(pwd, "getpwnam", _fail)  # the service user is never looked up
    identity = service_identity()
    assert identity == Identity("alice", 1000, 1000)
    assert not identity.is_switched
    assert identity.popen_kwargs() == {}
    identity.own(tmp_path)
    assert chowns == []


def test_root_runs_servers_as_the_service_user(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, chowns: list[tuple[str, int, int]]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PGHA_SERVICE_USER", "pgha-svc")
    monkeypatch.setattr(pwd, "getpwnam", lambda name: _passwd(name, 990, 991))
    identity = service_identity()
    assert identity == Identity("pgha-svc", 990, 991)
    assert identity.is_switched
    assert identity.popen_kwargs() == {"user": 990, "group": 991, "extra_groups": []}
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "file").write_text("x")
    identity.own(tmp_path)
    owned = {str(c[0]) for c in chowns}
    assert owned == {str(tmp_path), str(tmp_path / "sub"), str(tmp_path / "sub" / "file")}
    assert {c[1:] for c in chowns} == {(990, 991)}


def test_root_creates_the_service_user_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PGHA_SERVICE_USER", "pgha-new")
    created: list[list[str]] = []

    def getpwnam(name: str) -> pwd.struct_passwd:
        if not created:
            raise KeyError(name)
        return _passwd(name, 985, 985)

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        created.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(pwd, "getpwnam", getpwnam)
    monkeypatch.setattr("pytest_pgha.sandbox.runas.subprocess.run", run)
    assert service_identity() == Identity("pgha-new", 985, 985)
    [argv] = created
    assert argv[0].endswith("useradd") and argv[-1] == "pgha-new"
    assert "--system" in argv and "/usr/sbin/nologin" in argv


def test_failing_useradd_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PGHA_SERVICE_USER", "pgha-new")
    monkeypatch.setattr(pwd, "getpwnam", _fail)
    monkeypatch.setattr(
        "pytest_pgha.sandbox.runas.subprocess.run",
        lambda argv, **_: subprocess.CompletedProcess(argv, 1, "", "cannot lock /etc/passwd"),
    )
    with pytest.raises(PghaError, match="could not create the unprivileged user 'pgha-new'") as e:
        service_identity()
    assert "Fix: create it (useradd --system pgha-new) or run pytest as a normal user" in str(
        e.value
    )


def test_root_as_the_service_user_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PGHA_SERVICE_USER", "root")
    with pytest.raises(PghaError, match="PGHA_SERVICE_USER='root' is root"):
        service_identity()


@pytest.mark.skipif(os.geteuid() != 0, reason="the real switch needs root")
def test_real_switch_as_root(tmp_path: Path) -> None:
    identity = service_identity()
    assert identity.uid != 0 and pwd.getpwnam(identity.name).pw_uid == identity.uid
    process = ManagedProcess(
        ["sleep", "30"],
        label="sleeper",
        log_path=tmp_path / "sleeper.log",
        identity=identity,
        registry=Registry(tmp_path / "registry"),
    )
    process.start()
    try:
        assert psutil.Process(process.pid).uids().real == identity.uid
    finally:
        process.stop(signal.SIGTERM, timeout=5)
    assert not process.running()
    assert list((tmp_path / "registry").iterdir()) == []


def _fail(name: str) -> pwd.struct_passwd:
    raise KeyError(name)
