"""The run's sandbox: where it lives, per-test directories, who owns them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_pgha.sandbox.context import default_base_dir, open_sandbox
from pytest_pgha.sandbox.runas import service_identity


def test_basedir_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PGHA_BASEDIR", str(tmp_path))
    assert default_base_dir() == tmp_path
    monkeypatch.delenv("PGHA_BASEDIR")
    assert default_base_dir() in (Path("/dev/shm/pgha"), Path("/tmp/pgha"))


def test_test_dirs_are_unique_owned_and_per_worker(
    monkeypatch: pytest.MonkeyPatch, inner_basedir: Path
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    sandbox = open_sandbox(inner_basedir, "run-1")
    first = sandbox.test_dir("test_x[pg15-a/b c]")
    second = sandbox.test_dir("test_x[pg15-a/b c]")
    assert first != second
    assert first.parent == second.parent == sandbox.run_dir / "gw3"
    assert first.name == "test_x-pg15-a-b-c"
    assert second.name == "test_x-pg15-a-b-c-1"
    assert first.stat().st_uid == service_identity().uid
    assert first.stat().st_mode & 0o755 == 0o755


def test_long_names_are_cut(inner_basedir: Path) -> None:
    path = open_sandbox(inner_basedir, "run-1").test_dir("t" * 300)
    assert len(path.name) == 60


def test_relative_basedir_is_made_absolute(
    monkeypatch: pytest.MonkeyPatch, inner_basedir: Path
) -> None:
    monkeypatch.chdir(inner_basedir)
    sandbox = open_sandbox(Path("rel"), "run-1")
    assert sandbox.base_dir == inner_basedir / "rel"
    assert sandbox.run_dir.is_absolute()


def test_own_run_dir_registers_it(inner_basedir: Path) -> None:
    sandbox = open_sandbox(inner_basedir, "script-run", own_run_dir=True)
    [(_, entry)] = sandbox.registry.entries()
    assert (entry.kind, entry.path) == ("directory", str(sandbox.run_dir))
    assert entry.owner_pid == os.getpid()
    # Without it (the plugin's workers), nothing more is registered.
    assert len(open_sandbox(inner_basedir, "plugin-run").registry.entries()) == 1
