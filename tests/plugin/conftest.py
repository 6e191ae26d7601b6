"""The plugin tested from outside: every test runs pytest in a subprocess (pytester)
on a small test file written the way users write theirs.

Each inner run gets its own sandbox basedir, so that what a run leaves behind can be
told apart from other runs on the machine. It cannot live under tmp_path: pytest
makes its temporary directories 0700, and the unprivileged service user PostgreSQL
runs as must reach the data directories below the basedir.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path

import psutil
import pytest
from plugin_helpers import processes_under


@pytest.fixture
def run_basedir() -> Generator[Path, None, None]:
    """A fresh, world-traversable basedir for one inner run (on /dev/shm when the
    machine has it, like the plugin's default)."""
    parent = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="pgha-plugin-test-", dir=parent))
    path.chmod(0o755)
    yield path
    # Safety net only (tests that care assert cleanliness themselves): a timed-out
    # inner run may have left servers whose command line or cwd names this basedir.
    leftovers = processes_under(path)
    for proc in leftovers:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(leftovers, timeout=10)
    shutil.rmtree(path, ignore_errors=True)
