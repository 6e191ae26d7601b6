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


# Fixtures of these tests that start servers without a cluster fixture of the plugin
# (which marks its own): clusters built per PostgreSQL version, the binaries and the
# sandbox themselves, and inner runs (pytester, subprocesses) with their base dirs.
LIVE_FIXTURES = frozenset(
    {"pg_version", "pgha_binaries", "pgha_sandbox", "inner_basedir", "run_basedir", "pytester"}
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if LIVE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.live)
