"""The outcome resolver: one verdict for every ledger transaction, and the durability
figures.

The ledger row is the judge. After the trial the harness reads, from whatever node is
primary now, which keys of the trial exist (one query), and:

- acknowledged and present: ok; acknowledged and absent: **lost** (a durability
  violation: the application was told the commit happened);
- definitely failed (the server said no before or at COMMIT) but present: **phantom**
  (a violation too); failed and absent: failed;
- indeterminate (the connection broke while COMMIT was in flight): present means
  **committed**, absent means **aborted**; except that absent with pg_xact_status
  'in progress' is **unknown**: a commit still waiting for a synchronous standby, whose
  row may yet appear.

pg_xact_status (txid_status before PostgreSQL 13) is only a cross-check. On a promoted
standby an xid the old primary used but never shipped is first "in the future" (an
error), and later handed to an unrelated transaction, after which pg_xact_status says
'committed' for a transaction whose row is gone. Each case where it alone would have
answered wrong, over the transactions someone would ask it about (the indeterminate
ones, and the lost ones an audit by xid would miss), is a `txid_status_trap`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_pgha.metrics.catalog import register_metric
from pytest_pgha.workload.ledger import LedgerEntry
from pytest_pgha.workload.records import Outcome

GROUP = "durability"
for _name, _meaning in (
    ("lost_acked_writes", "acknowledged commits whose row the current primary does not have"),
    ("phantom_writes", "transactions the server refused whose row exists anyway"),
    ("indeterminate_committed", "broken commits the ledger shows committed"),
    ("indeterminate_aborted", "broken commits the ledger shows never committed"),
    ("unknown_outcomes", "broken commits no evidence decides (e.g. still waiting for a standby)"),
    ("txid_status_traps", "transactions pg_xact_status alone would have judged wrong"),
    ("acked_writes", "commits the application was told succeeded"),
):
    register_metric(
        _name, unit="count", meaning=_meaning, precision="exact (ledger rows)", group=GROUP
    )
register_metric(
    "lost_window_ms",
    unit="ms",
    meaning="RPO in time: from the first lost acknowledged commit to the fault, or to "
    "the last lost one if later (0: none lost)",
    precision="the client's clock, microseconds",
    group=GROUP,
    timed=True,
)

# Verdicts that break the promise a stack makes: "what you were told is what happened".
VIOLATIONS = ("lost", "phantom")
IN_PROGRESS = "in progress"


class Verdict(str, enum.Enum):
    OK = "ok"
    LOST = "lost"
    FAILED = "failed"
    PHANTOM = "phantom"
    COMMITTED = "committed"
    ABORTED = "aborted"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Resolved:
    """One transaction's verdict, with the evidence."""

    entry: LedgerEntry
    verdict: Verdict
    present: bool
    xact_status: str | None  # pg_xact_status on the judging node, when asked
    reason: str = ""

    @property
    def trap(self) -> bool:
        """Whether pg_xact_status alone would have answered wrong."""
        status = self.xact_status
        if status is None or self.verdict not in (
            Verdict.COMMITTED,
            Verdict.ABORTED,
            Verdict.LOST,
        ):
            return False
        if status == "future":
            return True  # an error where an answer was needed
        if self.present:
            return status == "aborted"
        return status == "committed"

    def to_json(self) -> dict[str, Any]:
        record = self.entry.record
        return {
            "worker": record.client_id,
            "seq": self.entry.seq,
            "xid": self.entry.xid,
            "lsn": None if self.entry.lsn is None else f"{self.entry.lsn:X}",
            "server_port": self.entry.server_port,
            "timeline": self.entry.timeline,
            "outcome": record.outcome.value,
            "verdict": self.verdict.value,
            "xact_status": self.xact_status,
            "start_us": record.start_us,
            "end_us": record.end_us,
            "reason": self.reason,
        }


def needs_status(entry: LedgerEntry, present: bool) -> bool:
    """The transactions whose xid the resolver asks pg_xact_status about."""
    if entry.xid is None:
        return False
    if entry.outcome is Outcome.INDETERMINATE:
        return True
    return entry.outcome is Outcome.OK and not present


def resolve(
    entries: Iterable[LedgerEntry],
    present: set[tuple[int, int]],
    statuses: Mapping[int, str],
) -> list[Resolved]:
    """A verdict for every entry: present is the set of keys the judging node holds,
    statuses pg_xact_status there by xid (for the entries needs_status names)."""
    return [_resolve_one(e, e.key in present, statuses) for e in entries]


def _resolve_one(entry: LedgerEntry, present: bool, statuses: Mapping[int, str]) -> Resolved:
    status = statuses.get(entry.xid) if entry.xid is not None else None
    outcome = entry.outcome
    if outcome is Outcome.OK:
        verdict = Verdict.OK if present else Verdict.LOST
        return Resolved(entry, verdict, present, status)
    if outcome is Outcome.FAILED:
        verdict = Verdict.PHANTOM if present else Verdict.FAILED
        return Resolved(entry, verdict, present, status)
    if present:
        return Resolved(entry, Verdict.COMMITTED, present, status, "its row exists")
    if status == IN_PROGRESS:
        return Resolved(
            entry,
            Verdict.UNKNOWN,
            present,
            status,
            "no row yet and its transaction is still in progress (a commit waiting for "
            "a synchronous standby): it may yet appear",
        )
    return Resolved(entry, Verdict.ABORTED, present, status, "no row on the primary")


@dataclass(frozen=True)
class DurabilityFigures:
    acked_writes: int
    lost_acked_writes: int
    phantom_writes: int
    indeterminate_commits: int
    indeterminate_committed: int
    indeterminate_aborted: int
    unknown_outcomes: int
    txid_status_traps: int
    lost_window_ms: float

    def to_json(self) -> dict[str, int | float]:
        return dict(self.__dict__)


def figures(resolved: Sequence[Resolved], *, inject_us: int | None) -> DurabilityFigures:
    counts = {v: 0 for v in Verdict}
    for item in resolved:
        counts[item.verdict] += 1
    lost_ends = [r.entry.record.end_us for r in resolved if r.verdict is Verdict.LOST]
    window_ms = 0.0
    if lost_ends:
        # A killed primary's backends may acknowledge for a few ms after the fault's
        # timestamp: those count too.
        until = max(lost_ends) if inject_us is None else max(inject_us, max(lost_ends))
        window_ms = round((until - min(lost_ends)) / 1000, 1)
    indeterminate = sum(1 for r in resolved if r.entry.outcome is Outcome.INDETERMINATE)
    return DurabilityFigures(
        acked_writes=sum(1 for r in resolved if r.entry.outcome is Outcome.OK),
        lost_acked_writes=counts[Verdict.LOST],
        phantom_writes=counts[Verdict.PHANTOM],
        indeterminate_commits=indeterminate,
        indeterminate_committed=counts[Verdict.COMMITTED],
        indeterminate_aborted=counts[Verdict.ABORTED],
        unknown_outcomes=counts[Verdict.UNKNOWN],
        txid_status_traps=sum(1 for r in resolved if r.trap),
        lost_window_ms=window_ms,
    )


def verdict_counts(resolved: Iterable[Resolved]) -> dict[str, int]:
    counts = {v.value: 0 for v in Verdict}
    for item in resolved:
        counts[item.verdict.value] += 1
    return counts
