"""A durability trial's history in the form Jepsen's checkers read: one EDN map per
line, ``{:process P, :type :invoke|:ok|:fail|:info, :f :add, :value V, :time NS}``, a
set workload (each ledger row an element added), closed by one final read of every
element the primary holds. elle-cli's and Jepsen's `set` checkers take it as is
(README: "Cross-checking with Jepsen")."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pytest_pgha.workload.ledger import LedgerEntry

# The element a ledger row stands for: worker and sequence in one integer.
WORKER_STRIDE = 1_000_000_000
_TYPE = {"ok": ":ok", "failed": ":fail", "indeterminate": ":info"}


def element(worker: int, seq: int) -> int:
    return worker * WORKER_STRIDE + seq


def jepsen_history(
    entries: Sequence[LedgerEntry], present: Iterable[tuple[int, int]], *, reader: int = -1
) -> str:
    """The history, operations in time order; process -1 is the final read."""
    if not entries:
        return ""
    origin = min(e.record.start_us for e in entries)
    workers = max(e.record.client_id for e in entries) + 1
    # Jepsen's processes are single-threaded: after an :info (the outcome unknown, the
    # operation may still be running) the worker goes on as a new process.
    crashed: dict[int, int] = {}
    events: list[tuple[int, str]] = []
    for entry in sorted(entries, key=lambda e: (e.record.client_id, e.record.start_us)):
        record = entry.record
        worker = record.client_id
        process = worker + crashed.get(worker, 0) * workers
        value = element(worker, entry.seq)
        start = (record.start_us - origin) * 1000
        end = (record.end_us - origin) * 1000
        kind = _TYPE[record.outcome.value]
        events.append((start, _op(process, ":invoke", value, start)))
        events.append((end, _op(process, kind, value, end)))
        if kind == ":info":
            crashed[worker] = crashed.get(worker, 0) + 1
    events.sort(key=lambda pair: pair[0])
    last = events[-1][0] + 1
    values = " ".join(str(element(w, s)) for w, s in sorted(present))
    lines = [line for _, line in events]
    lines.append(f"{{:process {reader}, :type :invoke, :f :read, :value nil, :time {last}}}")
    lines.append(
        f"{{:process {reader}, :type :ok, :f :read, :value #{{{values}}}, :time {last + 1}}}"
    )
    return "\n".join(lines) + "\n"


def _op(process: int, kind: str, value: int, time_ns: int) -> str:
    return f"{{:process {process}, :type {kind}, :f :add, :value {value}, :time {time_ns}}}"
