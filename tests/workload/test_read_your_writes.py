"""The read-your-writes helper against a real standby: it waits for the client's last
commit to be replayed, and says which node, which LSN and how far behind when it
cannot."""

import pytest

from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory
from pytest_pgha.workload.read_your_writes import ReadYourWrites, StaleStandby

async_pair = pgha_cluster_factory(replicas=1)


@pytest.fixture
def ledger(async_pair):
    primary, standby = async_pair.primary, async_pair.replicas[0]
    primary.sql("CREATE TABLE IF NOT EXISTS ryw (id int PRIMARY KEY)", user="app")
    primary.sql("TRUNCATE ryw", user="app")
    async_pair.wait_for_replay()
    with primary.connect("app") as writer, standby.connect("app") as reader:
        yield writer, reader, standby
    if standby.value("SELECT pg_is_wal_replay_paused()"):
        standby.sql("SELECT pg_wal_replay_resume()")


def test_every_read_after_the_wait_sees_the_write(ledger):
    writer, reader, standby = ledger
    ryw = ReadYourWrites(timeout_s=10)
    for i in range(200):
        writer.execute("INSERT INTO ryw VALUES (%s)", [i])
        ryw.note_commit(writer)
        ryw.wait_on(reader, standby.name)
        assert reader.execute("SELECT count(*) FROM ryw WHERE id = %s", [i]).fetchone() == (1,)


def test_a_standby_that_does_not_replay_is_named_with_its_lag(ledger):
    writer, reader, standby = ledger
    standby.sql("SELECT pg_wal_replay_pause()")
    writer.execute("INSERT INTO ryw VALUES (1)")
    ryw = ReadYourWrites(timeout_s=0.3)
    ryw.note_commit(writer)
    with pytest.raises(StaleStandby, match=rf"{standby.name} has not replayed .* bytes behind"):
        ryw.wait_on(reader, standby.name)
    # The read it prevented would have been stale.
    assert reader.execute("SELECT count(*) FROM ryw").fetchone() == (0,)
    standby.sql("SELECT pg_wal_replay_resume()")
    ryw.wait_on(reader, standby.name)
    assert reader.execute("SELECT count(*) FROM ryw").fetchone() == (1,)


def test_on_the_primary_there_is_nothing_to_wait_for(ledger):
    writer, _, _ = ledger
    ryw = ReadYourWrites(timeout_s=0.1)
    writer.execute("INSERT INTO ryw VALUES (1)")
    ryw.note_commit(writer)
    assert ryw.wait_on(writer, "the primary") < 100


def test_nonsense_timeouts_are_refused():
    with pytest.raises(ValueError, match="timeout_s and poll_interval_s must be positive"):
        ReadYourWrites(timeout_s=0)
