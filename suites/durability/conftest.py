"""The durability suite's clusters and replication paths.

Every standby streams through a toxiproxy link with a small, uneven latency (10 ms
± 5 ms each way, toxiproxy's latency toxic with jitter), so that standbys trail the
primary as over a real network and a loss, when the configuration allows one, happens
at every kill: a primary killed with its network (pytest_pgha.faults.inject.kill_primary
cuts the links) takes the WAL still in flight with it.
"""

import pytest

from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory

QUICK = {"wal_retrieve_retry_interval": "100ms"}
# One way, on every replication link: a round trip of 20 ms, each chunk of data
# delayed by up to LINK_JITTER_MS more or less (a WAN is never even).
LINK_LATENCY_MS = 10
LINK_JITTER_MS = 5
# The transactions each trial's workload offers per second (all workers): enough to
# have commits in flight at every kill, little enough to share 2 cores under -n 4.
RATE = 1000.0

sync_pair = pgha_cluster_factory(replicas=1, synchronous="FIRST 1 (*)", settings=QUICK)
sync_trio = pgha_cluster_factory(replicas=2, synchronous="FIRST 1 (*)", settings=QUICK)
async_pair = pgha_cluster_factory(replicas=1, settings=QUICK)


@pytest.fixture
def pgha_cluster(request: pytest.FixtureRequest):
    """The cluster a test names with @pytest.mark.parametrize("pgha_cluster", [...],
    indirect=True): sync_pair, sync_trio or async_pair."""
    return request.getfixturevalue(getattr(request, "param", "sync_pair"))


@pytest.fixture
def lagging_links(pgha_replication_links):
    """Every replication path through toxiproxy with LINK_LATENCY_MS ± LINK_JITTER_MS
    each way."""
    for link in pgha_replication_links.values():
        link.latency(LINK_LATENCY_MS, jitter_ms=LINK_JITTER_MS)
    return pgha_replication_links


@pytest.fixture
def load() -> dict[str, float]:
    return {"rate": RATE}
