"""The scripted HA manager: detect, decide, promote, rewire, follow, each phase
timestamped. Like the failover lab's `inject.sh && sleep 1 && promote.sh`, with the
sleep replaced, if asked, by a real probe loop."""

from __future__ import annotations

import threading
import time

from pytest_pgha import timeline as phase
from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.node import Node
from pytest_pgha.cluster.probe import postmaster_answers
from pytest_pgha.cluster.spec import SyncMode
from pytest_pgha.errors import ClusterError, PghaConfigError
from pytest_pgha.ha.base import DetectPolicy, RewirePath
from pytest_pgha.lag import prioritise
from pytest_pgha.proxies.base import Proxy
from pytest_pgha.timeline import Event, Timeline

# Before choosing, wait (at most the timeout) for the standbys' WAL receivers to stop
# streaming from the lost primary: one whose primary died sees the end of its
# connection within milliseconds; one cut off by a partition would stream on paper
# until wal_receiver_timeout, so the wait is bounded.
RECEIVERS_POLL_S = 0.005
RECEIVERS_STOP_TIMEOUT_S = 1.0
STREAMING_RECEIVERS_SQL = "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'"


def quorum_needed(mode: SyncMode) -> int:
    """How many of the listed standbys a failover must hear from to be sure that one of
    them has every acknowledged commit: m-n+1 under ANY n (m). Under FIRST n the same:
    which n of the m were synchronous depends on which were connected, so any n may
    have been. None under asynchronous replication, which promises nothing."""
    if not mode.enabled:
        return 0
    return len(mode.standbys) - mode.count + 1


def carried_sync_mode(mode: SyncMode, candidates: list[str]) -> SyncMode:
    """synchronous_standby_names for a newly promoted node: the same method and count
    over the standbys it can have now (candidates). With none left it replicates
    asynchronously until one rejoins, as Patroni's synchronous_mode (not strict) does:
    otherwise every commit would wait forever."""
    if not mode.enabled or not candidates:
        return SyncMode("off")
    return SyncMode(mode.method, min(mode.count, len(candidates)), tuple(candidates))


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class ScriptedHA:
    kind = "scripted"

    def __init__(
        self,
        cluster: Cluster,
        proxy: Proxy | None,
        timeline: Timeline,
        *,
        detect: DetectPolicy | None = None,
        rewire: RewirePath = "explicit",
        follow: bool = True,
        fence: bool = True,
    ) -> None:
        if rewire == "monitor" and proxy is not None and not proxy.has_monitor:
            raise PghaConfigError.invalid(
                "rewire",
                rewire,
                f"{proxy.kind} cannot find the primary by itself; use rewire='explicit'",
            )
        self.cluster = cluster
        self.proxy = proxy
        self.timeline = timeline
        self.detect = detect or DetectPolicy()
        self.rewire_path = rewire
        self.follow = follow
        self.fence = fence
        self._thread: threading.Thread | None = None
        self._result: Node | None = None
        self._error: BaseException | None = None
        self._closed = threading.Event()

    # -- the protocol --------------------------------------------------------------------
    def prepare(self) -> None:
        """Open a session to every standby before the fault, as a running HA agent has
        them: logins then cost nothing inside the failover window."""
        for node in self.cluster.replicas:
            node.open_kept_session()

    def start_failover(self, inject: Event, *, planned: bool = False) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(inject, planned), name="pgha-ha", daemon=True
        )
        self._thread.start()

    def wait(self, timeout: float) -> Node:
        if self._thread is None:
            raise ClusterError("no failover was started")
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise ClusterError(f"the scripted failover did not finish within {timeout:.0f}s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # -- the phases ------------------------------------------------------------------------
    def _run(self, inject: Event, planned: bool) -> None:
        prioritise()
        try:
            self._result = self.fail_over(inject, planned=planned)
        except BaseException as error:  # handed to wait() in the test's thread
            self._error = error

    def fail_over(self, inject: Event, *, planned: bool = False) -> Node:
        old = self.cluster.primary
        if not planned:
            self._detect(old, inject)
        self.timeline.record(phase.DETECT, planned=planned)
        if self.fence and not planned:
            # A primary declared dead must stay dead: a frozen one would otherwise
            # wake up still taking writes (split brain) and keep proxies' sessions
            # hanging on it.
            self.timeline.record(phase.FENCE, node=old.name, killed=old.fence())
        new = self._decide(exclude=old)
        carried = self._carry_synchronous(new, old)
        self.timeline.record(phase.PROMOTE_START, node=new.name, synchronous=carried)
        self.cluster.promote(new, kept=True)
        self.timeline.record(phase.PROMOTE_DONE, node=new.name)
        self._rewire(new)
        if self.follow:
            self._follow(new, old)
        return new

    def _detect(self, old: Node, inject: Event) -> None:
        policy = self.detect
        lag = self.timeline.lag
        if policy.delay_s is not None:
            planned = inject.monotonic_ns + int(policy.delay_s * 1e9)
            lag.sleep_until(planned, "detect", self._closed, overdue_counts=True)
            return
        assert policy.probe_interval_s is not None
        interval_ns = int(policy.probe_interval_s * 1e9)
        failures = 0
        while failures < policy.failures and not self._closed.is_set():
            started = time.monotonic_ns()
            ok = postmaster_answers(old.host, old.port, policy.probe_interval_s)
            failures = 0 if ok else failures + 1
            if failures < policy.failures:
                lag.sleep_until(started + interval_ns, "probe", self._closed)

    def _decide(self, exclude: Node) -> Node:
        """The most advanced standby by received, then replayed, LSN, read once no
        standby's WAL receiver still streams from the lost primary: until then it may
        still be writing out what it had in its socket buffer, and a standby picked on
        an earlier read can end up behind another, which then cannot follow it ("new
        timeline forked off ... before current recovery point")."""
        deadline = time.monotonic() + RECEIVERS_STOP_TIMEOUT_S
        while self._still_receiving(exclude) and time.monotonic() < deadline:
            time.sleep(RECEIVERS_POLL_S)
        positions = self._positions(exclude)
        if not positions:
            raise ClusterError("no standby left to promote")
        self._check_quorum(positions)
        chosen = max(positions, key=lambda name: positions[name])
        self.timeline.record(
            phase.DECIDE,
            node=chosen,
            lsns={n: [f"{a:X}", f"{b:X}"] for n, (a, b) in positions.items()},
        )
        return self.cluster.node(chosen)

    def _check_quorum(self, positions: dict[str, tuple[int, int]]) -> None:
        """Under ANY n (m standbys) a commit was acknowledged once n of them had it: only
        m-n+1 of them surely include one that has every acknowledged commit."""
        needed = quorum_needed(self.cluster.sync_mode)
        heard = [name for name in positions if name in self.cluster.sync_mode.standbys]
        if len(heard) < needed:
            raise ClusterError(
                f"under {self.cluster.sync_mode.to_guc()!r} a failover must hear from "
                f"{needed} of the listed standbys to be sure one has every acknowledged "
                f"commit; only {sorted(heard)} answered: refusing to promote"
            )

    def _carry_synchronous(self, new: Node, old: Node) -> str:
        """The cluster's synchronous replication, kept across the failover: the node
        about to be promoted gets synchronous_standby_names over the other running
        nodes before it accepts writes, so that its first commits already wait for a
        standby (without it, a synchronous cluster silently turns asynchronous). The
        cluster keeps the mode over all nodes: heal() restores it once the lost
        primary rejoins."""
        wanted = self.cluster.sync_mode
        if not wanted.enabled:
            return ""
        others = [n.name for n in self.cluster.nodes if n not in (new, old) and n.running()]
        mode = carried_sync_mode(wanted, others)
        new.value(
            f"ALTER SYSTEM SET synchronous_standby_names = {quote_literal(mode.to_guc())}",
            kept=True,
        )
        new.value("SELECT pg_reload_conf()", kept=True)
        every_other = [n.name for n in self.cluster.nodes if n is not new]
        self.cluster.sync_mode = SyncMode(wanted.method, wanted.count, tuple(every_other))
        return mode.to_guc()

    def _candidates(self, exclude: Node) -> list[Node]:
        return [n for n in self.cluster.nodes if n is not exclude and n.running()]

    def _still_receiving(self, exclude: Node) -> bool:
        for node in self._candidates(exclude):
            try:
                if node.value(STREAMING_RECEIVERS_SQL, kept=True):
                    return True
            except Exception:  # an unreachable standby is no candidate
                continue
        return False

    def _positions(self, exclude: Node) -> dict[str, tuple[int, int]]:
        """(received, replayed) LSN of every running standby but `exclude`."""
        positions = {}
        for node in self._candidates(exclude):
            try:
                wal = node.wal_positions(kept=True)
            except Exception:  # an unreachable standby is no candidate
                continue
            if wal.in_recovery:
                positions[node.name] = (wal.received or 0, wal.replayed or 0)
        return positions

    def _rewire(self, new: Node) -> None:
        proxy = self.proxy
        if proxy is None or proxy.kind == "direct":
            return  # clients find the new primary themselves
        self.timeline.record(phase.REWIRE_START, path=self.rewire_path, node=new.name)
        if self.rewire_path == "explicit":
            proxy.rewire(new.name)
        else:
            self._await_monitor(proxy, new)
        self.timeline.record(phase.REWIRE_DONE, path=self.rewire_path, node=new.name)

    def _await_monitor(self, proxy: Proxy, new: Node, timeout: float = 60.0) -> None:
        address = f"{new.host}:{new.port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._closed.is_set():
            try:
                sample = proxy.sample()
                if sample.writer == address and sample.writer_state == 1:
                    return
            except Exception:  # the proxy's admin interface may blink during failover
                pass
            time.sleep(0.01)
        raise ClusterError(
            f"{proxy.kind} did not route writes to {new.name} within {timeout:.0f}s by itself"
        )

    def _follow(self, new: Node, old: Node) -> None:
        for node in self.cluster.nodes:
            if node in (new, old) or not node.running():
                continue
            node.follow(new)
        self.timeline.record(phase.FOLLOW_DONE, node=new.name)
