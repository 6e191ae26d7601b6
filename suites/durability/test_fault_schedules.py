"""Fault schedules that hypothesis writes: on a safe configuration (FIRST 1 of 2
synchronous standbys, every standby through a toxiproxy link, the scripted HA manager
failing over to the most advanced standby), any sequence of writes, standby crashes,
cut and healed links, cancelled waits and failovers must keep at most one writable
primary and lose no acknowledged write (a write acknowledged through a cancelled wait,
with the server's WARNING, is not one the configuration promised to keep). A failing
schedule is shrunk to the shortest one and printed as steps.

Small by default (CI stays fast); `--hypothesis-profile=deep` runs many more and longer
schedules."""

from __future__ import annotations

import contextlib
import itertools
import threading

import psycopg
import pytest
from hypothesis import settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from hypothesis.strategies import sampled_from

from pytest_pgha.errors import ClusterError
from pytest_pgha.ha.base import DetectPolicy
from pytest_pgha.ha.scripted import ScriptedHA
from pytest_pgha.report.allure_report import attach_text
from pytest_pgha.timeline import Timeline

NODES = ("node0", "node1", "node2")
WRITE_TIMEOUT_S = 2.0
CANCEL_AFTER_S = 0.3


def schedule_size() -> tuple[int, int]:
    """(examples, steps per example) from the loaded profile: deep runs 25 x 25."""
    deep = settings.default.max_examples >= 1000
    return (25, 25) if deep else (5, 10)


class FaultSchedules(RuleBasedStateMachine):
    """Preconditions read the machine's own model of the faults (how many standbys
    are down, which links are cut), never the live cluster, and that model follows
    from the steps alone: hypothesis replays a schedule to shrink it, and a
    precondition that answered differently the second time would make the replay
    draw other steps. Which standby the HA manager promotes is the cluster's call, so
    a standby is picked by its rank among the running ones, not by name."""

    cluster = None
    links: dict = {}
    # One sequence over every example (and shrink): the table keeps earlier rows.
    keys = itertools.count(1)

    def __init__(self) -> None:
        super().__init__()
        self.kept: set[int] = set()  # acknowledged without a warning
        if not self.cluster.primary.running():
            pytest.fail("an earlier schedule left the cluster without a primary")
        self.standbys_down = 0
        self.cut: set[str] = set()

    def teardown(self) -> None:
        """Every fault healed: links mended, lost nodes back as streaming standbys
        of the primary, synchronous replication over all of them again."""
        for link in self.links.values():
            link.mend()
        self.cluster.heal()

    # -- rules --------------------------------------------------------------------
    @rule()
    def write(self) -> None:
        self._write(cancel=False)

    @rule()
    def write_then_cancel_its_wait(self) -> None:
        self._write(cancel=True)

    @precondition(lambda self: self.standbys_down < 2)
    @rule(rank=sampled_from((0, 1)))
    def crash_standby(self, rank: int) -> None:
        running = [node for node in self.cluster.replicas if node.running()]
        assert len(running) == 2 - self.standbys_down, "the model lost track of the cluster"
        running[rank % len(running)].crash()
        self.standbys_down += 1

    @rule(name=sampled_from(NODES))
    def cut_link(self, name: str) -> None:
        self.links[name].cut()
        self.cut.add(name)

    @rule(name=sampled_from(NODES))
    def heal_link(self, name: str) -> None:
        self.links[name].mend()
        self.cut.discard(name)

    @precondition(lambda self: not self.cut)
    @rule()
    def rejoin_lost_nodes(self) -> None:
        self.cluster.heal()
        self.standbys_down = 0

    @precondition(lambda self: self.standbys_down == 0)
    @rule()
    def kill_primary_and_fail_over(self) -> None:
        """The quorum needs both standbys answering; links cut or not, the HA manager
        picks the most advanced."""
        for link in self.links.values():
            link.mend()
        self.cut.clear()
        self.cluster.primary.crash()
        timeline = Timeline()
        ha = ScriptedHA(self.cluster, None, timeline, detect=DetectPolicy(delay_s=0.0))
        try:
            ha.fail_over(timeline.record("inject", fault="kill_primary"))
        except ClusterError:
            pytest.fail("the scripted HA manager could not fail over with every standby up")
        self.standbys_down = 1  # the old primary

    # -- invariants ---------------------------------------------------------------
    @invariant()
    def at_most_one_writable_primary(self) -> None:
        writable = []
        for node in self.cluster.nodes:
            if not node.running():
                continue
            try:
                if not node.is_in_recovery():
                    writable.append(node.name)
            except psycopg.Error:
                continue
        assert len(writable) <= 1, f"two writable primaries: {writable}"

    @invariant()
    def no_acknowledged_write_lost(self) -> None:
        if not self.kept:
            return
        rows = self.cluster.primary.sql(
            "SELECT k FROM schedule WHERE k = ANY(%s)", [sorted(self.kept)]
        )
        missing = self.kept - {int(r[0]) for r in rows}
        assert not missing, f"acknowledged writes lost: {sorted(missing)}"

    # -- helpers ------------------------------------------------------------------
    def _write(self, *, cancel: bool) -> None:
        """One INSERT in its own session. A cancel (asked for, or after WRITE_TIMEOUT_S
        when no synchronous standby answers) ends a waiting COMMIT with the server's
        WARNING: acknowledged, but not kept. It is sent from the client:
        statement_timeout is disabled before the commit, so it never ends that wait."""
        key = next(self.keys)
        notices: list[str] = []
        try:
            conn = self.cluster.primary.connect(connect_timeout=2)
        except psycopg.OperationalError:
            return
        conn.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
        timer = threading.Timer(CANCEL_AFTER_S if cancel else WRITE_TIMEOUT_S, _cancel, [conn])
        timer.start()
        try:
            conn.execute("INSERT INTO schedule VALUES (%s)", [key])
        except (psycopg.OperationalError, psycopg.errors.QueryCanceled):
            return  # failed or indeterminate: nothing promised
        finally:
            timer.cancel()
            conn.close()
        if not any("canceling wait for synchronous replication" in n for n in notices):
            self.kept.add(key)


def _cancel(conn: psycopg.Connection) -> None:
    with contextlib.suppress(psycopg.Error):
        conn.cancel_safe(timeout=5.0)


@pytest.mark.parametrize("pgha_cluster", ["sync_trio"], indirect=True)
def test_no_fault_schedule_loses_an_acknowledged_write(pgha_cluster, pgha_replication_links):
    pgha_cluster.primary.sql("CREATE TABLE IF NOT EXISTS schedule (k bigint PRIMARY KEY)")
    pgha_cluster.wait_for_replay()
    FaultSchedules.cluster = pgha_cluster
    FaultSchedules.links = pgha_replication_links
    FaultSchedules.keys = itertools.count(1)
    examples, steps = schedule_size()
    try:
        run_state_machine_as_test(
            FaultSchedules,
            settings=settings(max_examples=examples, stateful_step_count=steps, deadline=None),
        )
    except Exception as failure:
        # hypothesis notes the shrunk schedule, step by step, on the exception
        schedule = "\n".join(getattr(failure, "__notes__", []))
        if schedule:
            attach_text("shortest failing fault schedule", schedule)
        raise
