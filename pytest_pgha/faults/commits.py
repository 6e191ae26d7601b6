"""Faults that break commits, for durability trials: each acts on a running stack,
records what it did on the timeline, and returns the event that is time zero (the
moment the primary was lost, or the last break). Whether the HA manager then fails
over is the fault's `fails_over`.

Commits waiting for a synchronous standby are made by holding the standbys: their
replication path cut where a fault proxy is on it, else the standbys frozen (SIGSTOP:
their connections stay open, so the primary keeps waiting, as for a hung host).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.node import Node
from pytest_pgha.errors import ClusterError, PghaConfigError
from pytest_pgha.faults.inject import kill_primary, mend_paths_from, stop_primary
from pytest_pgha.faults.toxiproxy import Link
from pytest_pgha.timeline import INJECT, Event, Timeline

WAITERS_SQL = (
    "SELECT pid FROM pg_stat_activity"
    " WHERE wait_event = 'SyncRep' AND backend_type = 'client backend'"
)
WAITERS_TIMEOUT_S = 10.0
# How long the waits pile up before they are broken: every worker is then waiting.
PILE_UP_S = 0.15


@dataclass(frozen=True)
class FaultOptions:
    """What a durability fault may be told: rounds of a repeated break, and the
    standby a synchronous-replication change names."""

    rounds: int = 1
    standby: str | None = None
    # How long a hold_sync_standbys round keeps the standbys from acknowledging (and
    # a crash_restart waits between rounds).
    hold_s: float = 0.5
    # The fault proxy between the application and the stack (a toxiproxy link), for
    # the faults that break the client's connection.
    client_path: Link | None = None


FaultAction = Callable[[Cluster, Timeline, FaultOptions], Event]


@dataclass(frozen=True)
class CommitFault:
    name: str
    action: FaultAction
    fails_over: bool
    planned: bool = False
    needs_sync: bool = False
    meaning: str = ""


def _crash_restart(cluster: Cluster, timeline: Timeline, options: FaultOptions) -> Event:
    """Rounds of: SIGKILL of the primary (its network with it), crash recovery in
    place, the standbys reconnect and catch up."""
    event: Event | None = None
    for _ in range(options.rounds):
        if event is not None:
            time.sleep(options.hold_s)  # the workload commits again between kills
        event = kill_primary(cluster, timeline)
        primary = cluster.primary
        primary.restart_after_crash()
        mended = mend_paths_from(cluster, primary)
        timeline.record("restarted", node=primary.name, mended=mended)
        cluster.wait_for_replay(timeout=30)
    assert event is not None
    return event


def _kill(cluster: Cluster, timeline: Timeline, options: FaultOptions) -> Event:
    return kill_primary(cluster, timeline)


def _stop(cluster: Cluster, timeline: Timeline, options: FaultOptions) -> Event:
    return stop_primary(cluster, timeline)


def _none(cluster: Cluster, timeline: Timeline, options: FaultOptions) -> Event:
    return timeline.record(INJECT, fault="none", node=cluster.primary.name)


def sync_standbys(cluster: Cluster) -> list[Node]:
    mode = cluster.sync_mode
    if not mode.enabled:
        raise PghaConfigError.invalid(
            "fault",
            "a synchronous-replication fault",
            "the cluster replicates asynchronously: use a cluster with synchronous=...",
        )
    return [cluster.node(name) for name in mode.standbys if cluster.node(name).running()]


def waiting_pids(primary: Node) -> list[int]:
    return [int(row[0]) for row in primary.sql(WAITERS_SQL)]


@dataclass
class HeldStandbys:
    """Synchronous standbys kept from acknowledging: cut off on their replication
    path where it has a fault proxy (the WAL never arrives), frozen otherwise (their
    kernel still receives it, so a thawed standby catches up)."""

    cut: list[Node]
    frozen: list[Node]

    def release(self, timeline: Timeline) -> None:
        for node in self.cut:
            assert node.replication_path is not None
            node.replication_path.mend()
        for node in self.frozen:
            node.thaw()
        timeline.record("standbys_released", nodes=[n.name for n in self.cut + self.frozen])


def hold_sync_standbys(cluster: Cluster, timeline: Timeline) -> HeldStandbys:
    standbys = sync_standbys(cluster)
    held = HeldStandbys(
        cut=[n for n in standbys if n.replication_path is not None],
        frozen=[n for n in standbys if n.replication_path is None],
    )
    for node in held.cut:
        assert node.replication_path is not None
        node.replication_path.cut()
    for node in held.frozen:
        node.freeze()
    timeline.record(
        "standbys_held", cut=[n.name for n in held.cut], frozen=[n.name for n in held.frozen]
    )
    return held


def waiting_xids(primary: Node, pids: list[int]) -> list[str]:
    rows = primary.sql(
        "SELECT backend_xid::text FROM pg_stat_activity"
        " WHERE pid = ANY(%s) AND wait_event = 'SyncRep' AND backend_xid IS NOT NULL",
        [pids],
    )
    return [str(row[0]) for row in rows]


def still_waiting(primary: Node, xids: list[str]) -> bool:
    return bool(
        primary.value(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE backend_xid::text = ANY(%s) AND wait_event = 'SyncRep'",
            [xids],
        )
    )


MOVED_ON_TIMEOUT_S = 2.0


def moved_on(primary: Node, pids: list[int], xids: list[str]) -> bool:
    """Whether every session in pids runs a transaction other than those in xids."""
    return bool(
        primary.value(
            "SELECT count(*) = %s FROM pg_stat_activity WHERE pid = ANY(%s)"
            " AND backend_xid IS NOT NULL AND NOT backend_xid::text = ANY(%s)",
            [len(pids), pids, xids],
        )
    )


def pile_up_waiters(cluster: Cluster, timeline: Timeline) -> tuple[HeldStandbys, list[int]]:
    """Hold the synchronous standbys and wait until commits wait for them."""
    held = hold_sync_standbys(cluster, timeline)
    deadline = time.monotonic() + WAITERS_TIMEOUT_S
    pids: list[int] = []
    # Until the waiters stop growing in number: workers still reconnecting from an
    # earlier break join a little later.
    while time.monotonic() < deadline:
        time.sleep(PILE_UP_S)
        before, pids = len(pids), waiting_pids(cluster.primary)
        if pids and len(pids) == before:
            break
    if not pids:
        held.release(timeline)
        raise ClusterError(
            f"no commit waited for the held synchronous standbys within "
            f"{WAITERS_TIMEOUT_S:.0f}s: is the workload writing with synchronous_commit on?"
        )
    return held, pids


def _break_waits(signal_function: str, what: str) -> FaultAction:
    """Rounds of: hold the synchronous standbys, let commits pile up waiting, break
    every wait with signal_function, release, let the standbys catch up."""

    def act(cluster: Cluster, timeline: Timeline, options: FaultOptions) -> Event:
        event: Event | None = None
        for round_no in range(options.rounds):
            held, pids = pile_up_waiters(cluster, timeline)
            try:
                event = timeline.record(INJECT, fault=what, round=round_no, sessions=len(pids))
                cluster.primary.sql(
                    f"SELECT {signal_function}(pid) FROM unnest(%s::int[]) AS pid", [pids]
                )
            finally:
                held.release(timeline)
            cluster.wait_for_replay(timeout=30)
        assert event is not None
        return event

    return act


def _hold(cluster: Cluster, timeline: Timeline, options: FaultOptions) -> Event:
    """Rounds of: hold the synchronous standbys for hold_s, then release them. A client
    whose statement timeout is shorter gives up on its waiting COMMIT and closes the
    connection: an indeterminate commit, committed locally, that the standbys
    acknowledge later (still "in progress" while they are held)."""
    event: Event | None = None
    for round_no in range(options.rounds):
        held = hold_sync_standbys(cluster, timeline)
        try:
            event = timeline.record(INJECT, fault="hold_sync_standbys", round=round_no)
            time.sleep(options.hold_s)
        finally:
            held.release(timeline)
        cluster.wait_for_replay(timeout=30)
    assert event is not None
    return event


# How long each round's toxic stays on the client path: every open connection meets it.
CLIENT_FAULT_S = 0.1


def _client_toxic(kind: str, what: str) -> FaultAction:
    """Rounds of a toxic on every client connection, on the server's replies (a COMMIT
    already sent meets it when its answer comes back), then normal service while the
    clients reconnect. reset_peer: a TCP RST, CLIENT_FAULT_S long. timeout of 0: a
    blackhole for hold_s, which the clients' own statement timeout ends (give them a
    shorter one); the link then drops what is left of those connections. With commits
    slowed by a synchronous standby far away, most connections are hit inside COMMIT."""

    def act(cluster: Cluster, timeline: Timeline, options: FaultOptions) -> Event:
        link = options.client_path
        if link is None:
            raise PghaConfigError.invalid(
                "fault", what, "it acts on the client path: use the pgha_client_link fixture"
            )
        event: Event | None = None
        for round_no in range(options.rounds):
            event = timeline.record(INJECT, fault=what, round=round_no)
            name = link.add_toxic(kind, stream="downstream", timeout=0)
            try:
                time.sleep(options.hold_s if kind == "timeout" else CLIENT_FAULT_S)
            finally:
                link.remove_toxic(name)
            if kind == "timeout":
                link.set_enabled(False)
                link.set_enabled(True)
            time.sleep(RECONNECT_S if kind == "timeout" else options.hold_s)
        assert event is not None
        return event

    return act


# After a blackhole round: time for the clients to reconnect.
RECONNECT_S = 0.5


def _cancel_then_fail_over(cluster: Cluster, timeline: Timeline, options: FaultOptions) -> Event:
    """The talk's myth 2: a cancelled wait is acknowledged (COMMIT returns success with
    a WARNING) though no standby has the commit; then the primary is lost and the
    frozen standby, thawed, is promoted without it."""
    if any(node.replication_path is None for node in sync_standbys(cluster)):
        raise PghaConfigError.invalid(
            "fault",
            "cancel_sync_waits_then_fail_over",
            "it cuts the synchronous standbys off (a frozen standby's kernel would still "
            "receive the WAL): use the pgha_replication_links fixture",
        )
    held, pids = pile_up_waiters(cluster, timeline)
    try:
        primary = cluster.primary
        # Two waves. The commits waiting when the link was cut may have had their WAL
        # in flight on it already (toxiproxy delivers what a latency toxic holds when
        # another toxic is added), so the standby can have them; the commits that the
        # same sessions wait on next were written after the cut and never reach it.
        xids = _cancel_waits(primary, pids)
        pids = _await_waiters(primary, pids)
        xids += _cancel_waits(primary, pids)
        timeline.record("waits_cancelled", sessions=len(pids), xids=xids)
        event = kill_primary(cluster, timeline)
    finally:
        held.release(timeline)
    return event


def _cancel_waits(primary: Node, pids: list[int]) -> list[str]:
    """Cancel the synchronous waits of pids; return once their clients read the
    acknowledgement. Returns the cancelled commits' xids."""
    xids = waiting_xids(primary, pids)
    primary.sql("SELECT pg_cancel_backend(pid) FROM unnest(%s::int[]) AS pid", [pids])
    # Until the cancelled commits returned (their sessions go on to the next
    # transaction, which waits in turn: the xids tell the waits apart).
    deadline = time.monotonic() + WAITERS_TIMEOUT_S
    while still_waiting(primary, xids):
        if time.monotonic() > deadline:
            raise ClusterError(
                f"cancelled commits still waited for the standby after {WAITERS_TIMEOUT_S:.0f}s"
            )
        time.sleep(0.005)
    # And until their clients read the acknowledgement: a session that began its
    # next transaction did (a kill before that would break their connections).
    deadline = time.monotonic() + MOVED_ON_TIMEOUT_S
    while not moved_on(primary, pids, xids) and time.monotonic() < deadline:
        time.sleep(0.005)
    return xids


def _await_waiters(primary: Node, pids: list[int]) -> list[int]:
    """Until the sessions in pids wait for the held standbys again (those that do
    within WAITERS_TIMEOUT_S)."""
    deadline = time.monotonic() + WAITERS_TIMEOUT_S
    while time.monotonic() < deadline:
        waiting = [pid for pid in waiting_pids(primary) if pid in pids]
        if len(waiting) == len(pids):
            return waiting
        time.sleep(0.005)
    if not waiting:
        raise ClusterError(
            f"no session waited for the held standbys again within {WAITERS_TIMEOUT_S:.0f}s"
        )
    return waiting


def _make_synchronous(safe: bool) -> FaultAction:
    """The talk's myth 4: make an asynchronous standby synchronous, then lose the
    primary at once. Naive: change synchronous_standby_names and reload; the standby
    may still trail, and what it lacks was acknowledged. Safe: set_synchronous, which
    waits until the standby has everything the primary acknowledged."""

    def act(cluster: Cluster, timeline: Timeline, options: FaultOptions) -> Event:
        standby = options.standby or cluster.replicas[0].name
        guc = f"FIRST 1 ({standby})"
        if safe:
            cluster.set_synchronous(guc)
        else:
            primary = cluster.primary
            primary.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{guc}'")
            primary.sql("SELECT pg_reload_conf()")
            deadline = time.monotonic() + 10
            while primary.value("SHOW synchronous_standby_names") != guc:
                if time.monotonic() > deadline:
                    raise ClusterError("synchronous_standby_names did not take effect in 10s")
                time.sleep(0.005)
        timeline.record("made_synchronous", standby=standby, safe=safe)
        return kill_primary(cluster, timeline)

    return act


COMMIT_FAULTS: dict[str, CommitFault] = {
    fault.name: fault
    for fault in (
        CommitFault("none", _none, fails_over=False, meaning="no fault: the baseline"),
        CommitFault(
            "kill_primary", _kill, fails_over=True, meaning="SIGKILL of the primary, failover"
        ),
        CommitFault(
            "crash_restart",
            _crash_restart,
            fails_over=False,
            meaning="SIGKILL of the primary, crash recovery in place",
        ),
        CommitFault(
            "stop_primary",
            _stop,
            fails_over=True,
            planned=True,
            meaning="fast shutdown of the primary, switchover",
        ),
        CommitFault(
            "terminate_sync_waits",
            _break_waits("pg_terminate_backend", "terminate_sync_waits"),
            fails_over=False,
            needs_sync=True,
            meaning="backends terminated while their COMMIT waits for a synchronous standby",
        ),
        CommitFault(
            "cancel_sync_waits",
            _break_waits("pg_cancel_backend", "cancel_sync_waits"),
            fails_over=False,
            needs_sync=True,
            meaning="queries cancelled while their COMMIT waits for a synchronous standby",
        ),
        CommitFault(
            "hold_sync_standbys",
            _hold,
            fails_over=False,
            needs_sync=True,
            meaning="synchronous standbys unreachable for hold_s; clients may give up",
        ),
        CommitFault(
            "reset_client_connections",
            _client_toxic("reset_peer", "reset_client_connections"),
            fails_over=False,
            meaning="a TCP reset of every client connection, rounds of (pgha_client_link)",
        ),
        CommitFault(
            "blackhole_client_connections",
            _client_toxic("timeout", "blackhole_client_connections"),
            fails_over=False,
            meaning="every client connection blackholed for a moment (pgha_client_link)",
        ),
        CommitFault(
            "cancel_sync_waits_then_fail_over",
            _cancel_then_fail_over,
            fails_over=True,
            needs_sync=True,
            meaning="cancelled waits acknowledged, then the primary lost and a standby promoted",
        ),
        CommitFault(
            "make_synchronous_naive_then_kill",
            _make_synchronous(safe=False),
            fails_over=True,
            meaning="synchronous_standby_names changed and reloaded, primary killed at once",
        ),
        CommitFault(
            "make_synchronous_safe_then_kill",
            _make_synchronous(safe=True),
            fails_over=True,
            meaning="set_synchronous (waits for the standby to catch up), then the kill",
        ),
    )
}
