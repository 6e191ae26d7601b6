"""The stack under test: a primary and two standbys, commits waiting for either one."""

from pytest_pgha import pgha_cluster_factory

# The scenarios and the proxy use the fixture named pgha_cluster.
pgha_cluster = pgha_cluster_factory(
    replicas=2,
    synchronous="ANY 1 (*)",
    settings={"wal_retrieve_retry_interval": "100ms"},
)
