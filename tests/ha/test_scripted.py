"""The scripted HA manager on real clusters: whom it promotes, that it fences, how it
detects, and that every phase is on the timeline."""

import time

import pytest

from pytest_pgha.cluster.node import WalPositions
from pytest_pgha.cluster.probe import postmaster_answers
from pytest_pgha.cluster.spec import SyncMode
from pytest_pgha.errors import PghaConfigError
from pytest_pgha.ha.scripted import DetectPolicy, ScriptedHA
from pytest_pgha.timeline import Timeline


def names(timeline):
    return [e.name for e in timeline.events]


def test_promotes_the_most_advanced_standby(pgha_cluster):
    lagging, ahead = pgha_cluster.replicas
    lagging.sql("SELECT pg_wal_replay_pause()")
    pgha_cluster.primary.sql("UPDATE pgbench_accounts SET abalance = 1 WHERE aid <= 1000")
    pgha_cluster.wait_for_replay(standbys=[ahead])
    timeline = Timeline()
    ha = ScriptedHA(pgha_cluster, None, timeline, detect=DetectPolicy(delay_s=0.0))
    inject = timeline.record("inject")
    pgha_cluster.primary.kill()

    new = ha.fail_over(inject)

    assert new is ahead and pgha_cluster.primary is ahead
    assert not ahead.is_in_recovery()
    decide = timeline.first("decide")
    assert decide.detail["node"] == ahead.name
    assert names(timeline) == [
        "inject",
        "detect",
        "fence",
        "decide",
        "promote_start",
        "promote_done",
        "follow_done",
    ]
    assert timeline.first("fence").detail["killed"] == 0  # SIGKILLed already


def test_a_frozen_primary_is_detected_by_probe_and_fenced(pgha_cluster):
    old = pgha_cluster.primary
    timeline = Timeline()
    ha = ScriptedHA(
        pgha_cluster,
        None,
        timeline,
        detect=DetectPolicy(delay_s=None, probe_interval_s=0.1, failures=2),
    )
    ha.prepare()
    inject = timeline.record("inject")
    old.freeze()
    assert not postmaster_answers("127.0.0.1", old.port, 0.1)

    new = ha.fail_over(inject)

    detect_ms = (timeline.first("detect").epoch_us - inject.epoch_us) / 1000
    assert 150 <= detect_ms <= 1500  # two failed probes of 100 ms each
    fence = timeline.first("fence")
    assert fence.detail["node"] == old.name and fence.detail["killed"] > 0
    deadline = time.monotonic() + 5
    while old.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not old.running(), "the frozen old primary survived its fencing"
    assert new.name in pgha_cluster.topology().in_recovery
    # The other standby follows the new primary.
    pgha_cluster.wait_streaming([n for n in pgha_cluster.replicas if n is not old])


def test_a_planned_switchover_neither_waits_nor_fences(pgha_cluster):
    old = pgha_cluster.primary
    timeline = Timeline()
    ha = ScriptedHA(pgha_cluster, None, timeline, detect=DetectPolicy(delay_s=5.0))
    inject = timeline.record("inject")
    old.stop("fast")
    started = time.monotonic()
    ha.start_failover(inject, planned=True)
    new = ha.wait(timeout=30)
    assert time.monotonic() - started < 5.0
    assert "fence" not in names(timeline)
    old.rejoin(new)
    pgha_cluster.wait_streaming([old])


def test_wait_hands_failures_to_the_caller(pgha_cluster):
    for node in pgha_cluster.replicas:
        node.stop("immediate")
    timeline = Timeline()
    ha = ScriptedHA(pgha_cluster, None, timeline, detect=DetectPolicy(delay_s=0.0))
    ha.start_failover(timeline.record("inject"))
    with pytest.raises(Exception, match="no standby left to promote"):
        ha.wait(timeout=30)


@pytest.mark.parametrize(
    "policy",
    [
        {"delay_s": None, "probe_interval_s": None},
        {"delay_s": 1.0, "probe_interval_s": 0.5},
        {"delay_s": -1.0},
        {"delay_s": None, "probe_interval_s": 0.001},
    ],
)
def test_impossible_detection_policies_are_refused(policy):
    with pytest.raises(PghaConfigError, match="invalid"):
        DetectPolicy(**policy)


def test_the_probe_tells_a_live_postmaster_from_a_closed_port(pgha_cluster):
    node = pgha_cluster.replicas[0]
    assert postmaster_answers("127.0.0.1", node.port, 1.0)
    node.stop("fast")
    assert not postmaster_answers("127.0.0.1", node.port, 0.2)


class DrainingStandby:
    """A standby whose WAL receiver still streams from the dead primary for a few
    reads, taking in `late_bytes` more before it stops."""

    def __init__(self, name, received, late_bytes=0, streaming_reads=0):
        self.name = name
        self.received = received
        self.late_bytes = late_bytes
        self.streaming_reads = streaming_reads

    def running(self):
        return True

    def value(self, query, params=None, *, kept=False):
        if self.streaming_reads:
            self.streaming_reads -= 1
            return 1
        self.received += self.late_bytes
        self.late_bytes = 0
        return 0

    def wal_positions(self, *, kept=False):
        return WalPositions(True, None, None, self.received, self.received)


class FakeCluster:
    sync_mode = SyncMode("off")

    def __init__(self, *nodes):
        self.nodes = list(nodes)

    def node(self, name):
        return next(n for n in self.nodes if n.name == name)


def test_the_choice_waits_for_wal_receivers_to_stop_streaming():
    """Read at once, node1 looks ahead; node2's receiver is still writing out what the
    dead primary sent and ends 0x100 bytes further: it is the one to promote."""
    dead = DrainingStandby("node0", 0)
    ahead_at_first = DrainingStandby("node1", 0x2000)
    draining = DrainingStandby("node2", 0x1F00, late_bytes=0x200, streaming_reads=3)
    cluster = FakeCluster(dead, ahead_at_first, draining)
    ha = ScriptedHA(cluster, None, Timeline())

    assert ha._decide(exclude=dead) is draining
