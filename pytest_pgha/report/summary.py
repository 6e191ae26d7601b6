"""The run summary: which SLOs each failover test met, across all xdist workers.

Each worker collects :class:`SummaryEntry` objects; pytest-xdist carries them to the
controller in ``config.workeroutput``, which only holds JSON-serialisable values, so
entries travel as one JSON string per worker (:func:`to_workeroutput` /
:func:`from_workeroutput`). The controller merges them and writes one file.

An SLO result is a plain dict so this module does not depend on the SLO package; the
keys read here are ``metric``, ``measured``, ``op``, ``bound`` and ``passed`` (bool),
plus the optional ``unit`` and ``timed`` (the catalog's).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

UNITS_SHOWN = frozenset({"ms", "bytes"})


@dataclass
class SummaryEntry:
    nodeid: str
    metrics: dict[str, Any]
    slo_results: list[dict[str, Any]] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "metrics": self.metrics,
            "slo_results": self.slo_results,
            "parameters": self.parameters,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SummaryEntry:
        return cls(
            nodeid=str(data["nodeid"]),
            metrics=dict(data.get("metrics") or {}),
            slo_results=[dict(r) for r in data.get("slo_results") or []],
            parameters=dict(data.get("parameters") or {}),
        )


def to_workeroutput(entries: Iterable[SummaryEntry]) -> str:
    """One worker's entries as a string for ``config.workeroutput``."""
    return _dumps([entry.to_json() for entry in entries])


def from_workeroutput(payload: str) -> list[SummaryEntry]:
    """Entries from a :func:`to_workeroutput` string (empty string: no entries)."""
    if not payload.strip():
        return []
    return [SummaryEntry.from_json(item) for item in json.loads(payload)]


def write_entries(entries: Iterable[SummaryEntry], path: Path) -> Path:
    """Write one worker's entries as a JSON list (for runs that share a directory)."""
    _write_atomically(path, to_workeroutput(entries))
    return path


def read_entries(path: Path) -> list[SummaryEntry]:
    return from_workeroutput(path.read_text())


def merge_entries(*worker_entries: Iterable[SummaryEntry]) -> list[SummaryEntry]:
    """All workers' entries ordered by node id, so the summary does not depend on which
    worker ran which test; entries with the same node id (reruns) keep their order."""
    merged = [entry for entries in worker_entries for entry in entries]
    return sorted(merged, key=lambda entry: entry.nodeid)


def slo_counts(entries: Iterable[SummaryEntry]) -> tuple[int, int]:
    """(passed, failed) over every SLO result of every entry."""
    passed = failed = 0
    for entry in entries:
        for result in entry.slo_results:
            if result.get("passed"):
                passed += 1
            else:
                failed += 1
    return passed, failed


def write_summary(entries: Iterable[SummaryEntry], path: Path) -> Path:
    """Write the run summary atomically: readers never see a half-written file."""
    entries = list(entries)
    passed, failed = slo_counts(entries)
    summary = {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tests": [entry.to_json() for entry in entries],
        "slo": {"passed": passed, "failed": failed},
    }
    _write_atomically(path, _dumps(summary, indent=2))
    return path


def format_terminal_summary(entries: Iterable[SummaryEntry]) -> list[str]:
    """One line per SLO result: ``PASS|FAIL nodeid metric measured op bound``; a timing
    figure carries the harness's own timing error of its trial beside it."""
    return [
        _format_result(entry.nodeid, result) + _timing_error(entry, result)
        for entry in entries
        for result in entry.slo_results
    ]


def _timing_error(entry: SummaryEntry, result: dict[str, Any]) -> str:
    lags = [entry.metrics.get(name) for name in ("harness_lag_ms_max", "workload_lag_ms_max")]
    known = [lag for lag in lags if isinstance(lag, (int, float))]
    if not result.get("timed") or not known:
        return ""
    return f" (harness timing error <= {_format_value(float(max(known)))} ms)"


def _format_result(nodeid: str, result: dict[str, Any]) -> str:
    verdict = "PASS" if result.get("passed") else "FAIL"
    unit = result.get("unit")
    # Durations and sizes carry their unit; counts read plainly.
    suffix = f" {unit}" if unit in UNITS_SHOWN else ""
    measured = _format_value(result.get("measured")) + suffix
    bound = _format_value(result.get("bound")) + suffix
    metric = result.get("metric", "?")
    op = result.get("op", "?")
    return f"{verdict} {nodeid} {metric} {measured} {op} {bound}"


def _format_value(value: object) -> str:
    if value is None:
        # A metric the run could not measure (e.g. writes never resumed).
        return "n/a"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _dumps(payload: object, indent: int | None = None) -> str:
    # default=str: a metric value of an unexpected type degrades to text instead of
    # losing the whole summary at the end of a long run.
    return json.dumps(payload, indent=indent, default=str)


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # The temporary file lives in the target directory: os.replace is only atomic
    # within one file system.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.write("\n")
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
