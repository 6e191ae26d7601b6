"""The stale-read prober on a real primary and standby: a standby whose replay is
paused serves stale reads, measured in ms and bytes; the primary never does."""

import time

import pytest

from pytest_pgha.metrics.staleness import staleness
from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory
from pytest_pgha.workload.stale_reads import StaleReadProber

async_pair = pgha_cluster_factory(replicas=1)


@pytest.fixture
def prober(async_pair):
    primary, standby = async_pair.primary, async_pair.replicas[0]
    probe = StaleReadProber(
        primary.dsn("app"), {"primary": primary.dsn("app"), "standby": standby.dsn("app")}
    )
    probe.setup()
    async_pair.wait_for_replay()
    yield probe, standby
    if standby.value("SELECT pg_is_wal_replay_paused()"):
        standby.sql("SELECT pg_wal_replay_resume()")


def test_a_paused_standby_serves_stale_reads_and_the_primary_none(prober):
    probe, standby = prober
    standby.sql("SELECT pg_wal_replay_pause()")
    with probe:
        time.sleep(0.5)
    assert not probe.errors
    report = staleness(probe.writes, probe.reads)
    assert report["primary"].stale == 0 and report["primary"].reads > 10
    paused = report["standby"]
    # Every read after the first acknowledged write missed it.
    assert paused.reads > 10 and paused.stale_read_pct > 80
    assert paused.staleness_ms.max is not None and paused.staleness_ms.max > 100
    assert paused.staleness_bytes.p50 is not None and paused.staleness_bytes.p50 > 0


def test_a_standby_that_replays_is_mostly_fresh(prober):
    """Not a timing bound: only that replay catching up shows as fresh reads."""
    probe, _ = prober
    with probe:
        time.sleep(0.5)
    report = staleness(probe.writes, probe.reads)["standby"]
    assert report.reads > 10 and report.stale < report.reads


def test_no_endpoint_is_refused():
    with pytest.raises(ValueError, match="at least one read endpoint"):
        StaleReadProber("host=x", {})
