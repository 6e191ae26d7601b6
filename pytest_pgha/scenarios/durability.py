"""One durability trial: the ledger workload runs through the proxy, a fault breaks
commits (and the HA manager fails over, or the primary recovers in place), then every
transaction gets a verdict from the rows the primary holds now
(pytest_pgha.metrics.durability)."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.lsn import lsn_to_int
from pytest_pgha.errors import PghaConfigError
from pytest_pgha.faults.commits import COMMIT_FAULTS, FaultOptions
from pytest_pgha.faults.toxiproxy import Link
from pytest_pgha.ha.base import DetectPolicy, HAOptions
from pytest_pgha.ha.registry import HA_MANAGERS
from pytest_pgha.lag import Heartbeat, LagSummary
from pytest_pgha.metrics.durability import (
    VIOLATIONS,
    DurabilityFigures,
    Resolved,
    Verdict,
    figures,
    needs_status,
    resolve,
    verdict_counts,
)
from pytest_pgha.metrics.failover import FailoverMetrics, compute_failover_metrics
from pytest_pgha.metrics.values import Measured, MetricValues
from pytest_pgha.proxies.samples import ProxySample
from pytest_pgha.scenarios.protocol import check_load, check_window, short_repr
from pytest_pgha.scenarios.stack import Stack
from pytest_pgha.timeline import Event
from pytest_pgha.workload.driver import WorkloadDriver, WorkloadOptions
from pytest_pgha.workload.jepsen import jepsen_history
from pytest_pgha.workload.ledger import LedgerEntry, create_ledger, ledger_keys, xact_statuses
from pytest_pgha.workload.records import Outcome, TxRecord

# pg_xact_status answers after which a missing row is read again.
RECHECK = ("committed", "in progress")
# The most transactions of each kind a report lists one by one.
LISTED = 200


@dataclass(frozen=True)
class DurabilityPlan:
    """What one durability trial does (README: "Durability")."""

    # A fault of pytest_pgha.faults.commits.COMMIT_FAULTS.
    fault: str = "kill_primary"
    ha: str = "scripted"
    detect_delay_s: float = 0.2
    workers: int = 8
    rate: float | None = None
    warmup_s: float = 1.0
    settle_s: float = 1.0
    # Settings the application sets in every transaction, e.g.
    # {"synchronous_commit": "local"}.
    session_settings: Mapping[str, str] = field(default_factory=dict)
    # Repeated faults (crash_restart, terminate_sync_waits, cancel_sync_waits,
    # hold_sync_standbys): how many rounds.
    rounds: int = 1
    # hold_sync_standbys: how long each round holds the standbys; crash_restart: the
    # pause between kills.
    hold_s: float = 0.5
    # The standby a make_synchronous_* fault names (default: the first replica).
    standby: str | None = None
    statement_timeout_s: float | None = 5.0
    failover_timeout_s: float = 60.0
    recovery_timeout_s: float = 10.0
    # Before the standbys' view is read, how long they may take to replay the
    # primary's WAL.
    catch_up_timeout_s: float = 30.0
    bucket_ms: int = 100

    def __post_init__(self) -> None:
        if self.fault not in COMMIT_FAULTS:
            raise PghaConfigError.invalid(
                "fault", self.fault, f"use one of {', '.join(COMMIT_FAULTS)}"
            )
        object.__setattr__(self, "ha", HA_MANAGERS.canonical(self.ha))
        check_load("durability", workers=self.workers, rate=self.rate)
        check_window("durability", warmup_s=self.warmup_s, settle_s=self.settle_s, least_s=0.2)
        if not isinstance(self.rounds, int) or not 1 <= self.rounds <= 1000:
            raise PghaConfigError.invalid("rounds", self.rounds, "use a whole number 1..1000")
        if not isinstance(self.session_settings, Mapping):
            raise PghaConfigError.invalid(
                "session_settings",
                self.session_settings,
                'give a mapping, e.g. {"synchronous_commit": "local"}',
            )
        if not 0 <= self.hold_s <= 60:
            raise PghaConfigError.invalid("hold_s", self.hold_s, "use 0..60 seconds")
        DetectPolicy(delay_s=self.detect_delay_s)  # validates

    def parameters(self, proxy_kind: str) -> dict[str, object]:
        parameters: dict[str, object] = {
            "proxy": proxy_kind,
            "fault": self.fault,
            "ha": self.ha if COMMIT_FAULTS[self.fault].fails_over else "none",
            "workers": self.workers,
            "rate": self.rate or "unthrottled",
        }
        if self.session_settings:
            parameters["session_settings"] = ", ".join(
                f"{k}={v}" for k, v in self.session_settings.items()
            )
        if self.rounds > 1:
            parameters["rounds"] = self.rounds
        return parameters


@dataclass
class StandbyView:
    """What one standby holds of the trial once it replayed the primary's WAL."""

    node: str
    caught_up: bool
    acked_missing: int
    present: int

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(repr=False)
class DurabilityResult:
    """One durability trial (see ScenarioResult)."""

    scenario: ClassVar[str] = "durability"

    plan: DurabilityPlan
    proxy_kind: str
    trial: int
    entries: list[LedgerEntry]
    resolved: list[Resolved]
    events: list[Event]
    inject: Event
    figures: DurabilityFigures
    write_side: FailoverMetrics
    judged_on: str
    present: set[tuple[int, int]]
    standby_views: list[StandbyView]
    harness_lag: LagSummary
    workload_lag: LagSummary
    added_metrics: dict[str, Measured] = field(default_factory=dict)

    @property
    def metrics(self) -> MetricValues:
        write_side = self.write_side.to_json()
        write_side.pop("bucket_ms")
        # The durability count of broken commits covers the whole trial, not only
        # what followed the fault: it replaces the write side's.
        return MetricValues({**write_side, **self.figures.to_json(), **self.added_metrics})

    @property
    def parameters(self) -> dict[str, object]:
        return self.plan.parameters(self.proxy_kind)

    @property
    def records(self) -> list[TxRecord]:
        return [e.record for e in self.entries]

    @property
    def samples(self) -> list[ProxySample]:
        return []

    @property
    def bucket_ms(self) -> int:
        return self.plan.bucket_ms

    def of_verdict(self, *verdicts: Verdict) -> list[Resolved]:
        return [r for r in self.resolved if r.verdict in verdicts]

    @property
    def violations(self) -> list[Resolved]:
        return [r for r in self.resolved if r.verdict.value in VIOLATIONS]

    def details(self) -> dict[str, Any]:
        listed = self.violations + self.of_verdict(Verdict.UNKNOWN)
        traps = [r for r in self.resolved if r.trap]
        return {
            "trial": self.trial,
            "judged_on": self.judged_on,
            "verdicts": verdict_counts(self.resolved),
            "violations_and_unknowns": [r.to_json() for r in listed[:LISTED]],
            "txid_status_traps_listed": [r.to_json() for r in traps[:LISTED]],
            "standby_views": [v.to_json() for v in self.standby_views],
            "harness_lag": self.harness_lag.to_json(),
            "workload_lag": self.workload_lag.to_json(),
        }

    def attachments(self) -> dict[str, str]:
        listed = self.violations + self.of_verdict(Verdict.UNKNOWN)
        return {
            "verdicts.json": json.dumps(verdict_counts(self.resolved), indent=2),
            "lost, phantom and unknown transactions.json": json.dumps(
                [r.to_json() for r in listed], indent=2
            ),
            "ledger.log": "\n".join(e.to_line() for e in self.entries) + "\n",
            "history.edn (Jepsen set workload)": jepsen_history(self.entries, self.present),
        }

    def chart_series(self) -> dict[str, list[int]]:
        """End times (µs) of the acknowledged, lost and broken commits, for the chart."""
        return {
            "acked": [e.record.end_us for e in self.entries if e.outcome is Outcome.OK],
            "lost": [r.entry.record.end_us for r in self.of_verdict(Verdict.LOST)],
            "broken": [e.record.end_us for e in self.entries if e.outcome is Outcome.INDETERMINATE],
        }

    def __repr__(self) -> str:
        return short_repr(self)


def run_durability(stack: Stack, plan: DurabilityPlan) -> DurabilityResult:
    """Warm up, break commits, fail over (or recover in place), settle, resolve."""
    fault = COMMIT_FAULTS[plan.fault]
    cluster, proxy, timeline = stack.cluster, stack.proxy, stack.timeline
    options = FaultOptions(
        rounds=plan.rounds,
        standby=plan.standby,
        hold_s=plan.hold_s,
        client_path=stack.client_path if isinstance(stack.client_path, Link) else None,
    )
    if fault.needs_sync and not cluster.sync_mode.enabled:
        raise PghaConfigError.invalid(
            "fault",
            plan.fault,
            "it breaks commits waiting for a synchronous standby, and this cluster "
            "replicates asynchronously: use a cluster with synchronous='FIRST 1 (*)'",
        )
    trial = random.getrandbits(62)
    _prepare_ledger(cluster)
    ha = (
        HA_MANAGERS.create(
            plan.ha,
            cluster,
            proxy,
            timeline,
            HAOptions(detect=DetectPolicy(delay_s=plan.detect_delay_s)),
        )
        if fault.fails_over
        else None
    )
    driver = WorkloadDriver(
        stack.rw_dsn,
        WorkloadOptions(
            workers=plan.workers,
            scale=cluster.spec.scale,
            rate=plan.rate,
            statement_timeout_s=plan.statement_timeout_s,
            mode="ledger",
            trial=trial,
            session_settings=tuple((k, str(v)) for k, v in plan.session_settings.items()),
        ),
    )
    try:
        if ha is not None:
            ha.prepare()
        with driver:
            driver.await_recovered(driver.started_us, plan.recovery_timeout_s)
            with Heartbeat(timeline.lag):
                window_start_ns = time.monotonic_ns()
                time.sleep(plan.warmup_s)
                inject = fault.action(cluster, timeline, options)
                if ha is not None:
                    ha.start_failover(inject, planned=fault.planned)
                    ha.wait(plan.failover_timeout_s)
                driver.await_recovered(time.time_ns() // 1000, plan.recovery_timeout_s)
                time.sleep(plan.settle_s)
                until_us = time.time_ns() // 1000
                window_end_ns = time.monotonic_ns()
    finally:
        if ha is not None:
            ha.close()
    entries = driver.ledger_entries()
    resolved, judged_on, present = resolve_on_primary(cluster, trial, entries)
    views = standby_views(cluster, trial, entries, plan.catch_up_timeout_s)
    records = [e.record for e in entries]
    write_side = compute_failover_metrics(
        records,
        timeline.events,
        inject_us=inject.epoch_us,
        bucket_ms=plan.bucket_ms,
        until_us=until_us,
        workers=plan.workers,
    )
    return DurabilityResult(
        plan=plan,
        proxy_kind=proxy.kind,
        trial=trial,
        entries=entries,
        resolved=resolved,
        events=timeline.events,
        inject=inject,
        figures=figures(resolved, inject_us=inject.epoch_us),
        write_side=write_side,
        judged_on=judged_on,
        present=present,
        standby_views=views,
        harness_lag=timeline.lag.summary(window_start_ns, window_end_ns),
        workload_lag=driver.lag(window_start_ns, window_end_ns),
    )


def _prepare_ledger(cluster: Cluster) -> None:
    """The ledger table on the primary and, before any fault, on every standby: a
    standby promoted without it would make every row look lost."""
    create_ledger(cluster.primary)
    lsn = lsn_to_int(cluster.primary.value("SELECT pg_current_wal_insert_lsn()")) or 0
    running = [n for n in cluster.replicas if n.running()]
    cluster.wait_for_lsn(lsn, running, kind="replay", timeout=30)


def resolve_on_primary(
    cluster: Cluster, trial: int, entries: list[LedgerEntry]
) -> tuple[list[Resolved], str, set[tuple[int, int]]]:
    """The verdicts, judged on the node that is primary now: two queries, whatever the
    number of transactions (the keys, then pg_xact_status of the xids in question)."""
    primary = cluster.primary
    present = ledger_keys(primary, trial)
    asked = [e.xid for e in entries if e.xid is not None and needs_status(e, e.key in present)]
    statuses = xact_statuses(primary, asked)
    # A commit still waiting for its standby when the keys were read may have finished
    # by the time its status was: read the keys once more rather than call it aborted.
    if any(
        e.xid is not None and e.key not in present and statuses.get(e.xid) in RECHECK
        for e in entries
    ):
        present = ledger_keys(primary, trial)
    return resolve(entries, present, statuses), primary.name, present


def standby_views(
    cluster: Cluster, trial: int, entries: list[LedgerEntry], timeout: float
) -> list[StandbyView]:
    """Each running standby's copy of the ledger, once it replayed the primary's WAL
    (or the timeout passed: then caught_up says so)."""
    acked = {e.key for e in entries if e.outcome is Outcome.OK}
    views = []
    lsn = lsn_to_int(cluster.primary.value("SELECT pg_current_wal_insert_lsn()")) or 0
    for node in [n for n in cluster.replicas if n.running()]:
        try:
            cluster.wait_for_lsn(lsn, [node], kind="replay", timeout=timeout)
            caught_up = True
        except Exception:  # reported beside the view, never a reason to lose the trial
            caught_up = False
        try:
            keys = ledger_keys(node, trial)
        except Exception:
            continue
        views.append(StandbyView(node.name, caught_up, len(acked - keys), len(keys)))
    return views
