"""A real run as a normal user: servers run as that user, nothing is switched.

pytest here runs as root from a pyenv under /root (0700), which no other user can
reach. Debian's /usr/bin/python3 can, and has the same ABI: the test copies the
distributions the plugin needs into a world-readable directory, and runs the plugin
as `nobody` with that python.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from sandbox_helpers import NOTHING_LEFT, PG15_BINDIR, leftovers

import pytest_pgha
from pytest_pgha.cluster.binaries import missing_programs

SYSTEM_PYTHON = Path("/usr/bin/python3")
NORMAL_USER = "nobody"

AS_A_NORMAL_USER = """
import os
import psutil
from pytest_pgha.sandbox.runas import service_identity


def test_servers_run_as_me(pgha_cluster):
    me = os.geteuid()
    assert me != 0
    identity = service_identity()
    assert identity.uid == me and not identity.is_switched
    assert identity.popen_kwargs() == {}
    for node in pgha_cluster.nodes:
        assert psutil.Process(node.pid).uids().real == me
        assert node.datadir.stat().st_uid == me
    assert pgha_cluster.topology().streaming() == ["node1", "node2"]
"""


def _system_python_matches() -> bool:
    if not SYSTEM_PYTHON.exists():
        return False
    version = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return version == str(tuple(sys.version_info[:2]))  # compiled wheels need the ABI


pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="switching to a normal user needs root"),
    pytest.mark.skipif(
        not _system_python_matches(),
        reason=f"needs {SYSTEM_PYTHON} of Python {sys.version_info[0]}.{sys.version_info[1]}"
        " (apt-get install python3)",
    ),
    pytest.mark.skipif(bool(missing_programs(PG15_BINDIR)), reason="apt-get install postgresql-15"),
]


def _needed_distributions() -> set[str]:
    """What importing the plugin loads, and everything those require."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, pytest_pgha.plugin; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    by_package = metadata.packages_distributions()
    todo = {d for m in loaded for d in by_package.get(m.split(".")[0], [])}
    todo |= {"pytest"}
    needed: set[str] = set()
    while todo:
        name = todo.pop()
        if name.lower() in needed:
            continue
        needed.add(name.lower())
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.add(requirement.name)
    return needed - {"pytest-pgha"}  # its source is copied as it is now


def _copy_site(target: Path) -> None:
    for name in _needed_distributions():
        dist = metadata.distribution(name)
        for file in dist.files or []:
            source = Path(str(dist.locate_file(file)))
            if "__pycache__" in file.parts or ".." in file.parts or not source.is_file():
                continue
            (target / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / file)
    package = Path(pytest_pgha.__file__).parent
    shutil.copytree(package, target / "pytest_pgha", ignore=shutil.ignore_patterns("__pycache__"))


@pytest.fixture
def world_readable_dir() -> Generator[Path, None, None]:
    path = Path(tempfile.mkdtemp(prefix="pgha-nonroot-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _open_to_all(root: Path) -> None:
    for parent, _dirs, files in os.walk(root):
        os.chmod(parent, 0o755)
        for name in files:
            os.chmod(os.path.join(parent, name), 0o644)


def test_a_real_run_as_a_normal_user(world_readable_dir: Path, inner_basedir: Path) -> None:
    user = pwd.getpwnam(NORMAL_USER)
    site = world_readable_dir / "site"
    _copy_site(site)
    work = world_readable_dir / "work"
    work.mkdir()
    (work / "test_as_normal_user.py").write_text(AS_A_NORMAL_USER)
    _open_to_all(world_readable_dir)
    os.chown(work, user.pw_uid, user.pw_gid)
    os.chown(inner_basedir, user.pw_uid, user.pw_gid)
    argv = [
        str(SYSTEM_PYTHON),
        "-m",
        "pytest",
        "-p",
        "pytest_pgha.plugin",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--pgha-basedir={inner_basedir}",
        f"--pgha-pg-bindir={PG15_BINDIR}",
        "test_as_normal_user.py",
    ]
    env = {"PYTHONPATH": str(site), "HOME": str(work), "PATH": "/usr/bin:/bin"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    result = subprocess.run(
        argv,
        cwd=work,
        env=env,
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "1 passed" in output
    assert leftovers(inner_basedir) == NOTHING_LEFT
