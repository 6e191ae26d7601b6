"""Fixtures shared by the plugin's own tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest

from pytest_pgha.sandbox.context import reap_orphans


@pytest.fixture
def inner_basedir() -> Generator[Path, None, None]:
    """A basedir for inner runs (pytester, subprocesses, scripts): world-traversable
    (tmp_path is 0700, and the service user must reach the data directories), on
    /dev/shm when there is one; whatever the run left is reaped afterwards."""
    parent = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="pgha-test-", dir=parent))
    path.chmod(0o755)
    yield path
    reap_orphans(path, everything=True)
    shutil.rmtree(path, ignore_errors=True)
