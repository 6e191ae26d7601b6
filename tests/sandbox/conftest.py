"""Fixtures of the sandbox tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest

from pytest_pgha.sandbox.context import reap_orphans
from pytest_pgha.sandbox.runas import service_identity


@pytest.fixture
def inner_basedir() -> Generator[Path, None, None]:
    """A basedir for runs in subprocesses: world-traversable (tmp_path is 0700, and
    the service user must reach the data directories), on /dev/shm when there is one."""
    parent = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="pgha-test-", dir=parent))
    path.chmod(0o755)
    yield path
    reap_orphans(path, everything=True)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fresh_identity() -> Generator[None, None, None]:
    """service_identity() is cached per process: tests that fake the uid need it anew."""
    service_identity.cache_clear()
    yield
    service_identity.cache_clear()
