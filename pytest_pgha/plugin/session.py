"""The run's summary entries, collected per process and merged on the controller."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_pgha.report.summary import SummaryEntry

ENTRIES_KEY = pytest.StashKey[list[SummaryEntry]]()
SUMMARY_FILE = "pgha-summary.json"


def entries(config: pytest.Config) -> list[SummaryEntry]:
    return config.stash.setdefault(ENTRIES_KEY, [])


def add_entry(config: pytest.Config, entry: SummaryEntry) -> None:
    """Add a test's entry. Results checked in code (no metrics of their own) join the
    test's latest trial, so the summary holds one entry per trial, not per check."""
    collected = entries(config)
    if not entry.metrics:
        for earlier in reversed(collected):
            if earlier.nodeid == entry.nodeid:
                earlier.slo_results.extend(entry.slo_results)
                return
    collected.append(entry)


def summary_path(config: pytest.Config) -> Path:
    return Path(config.rootpath) / "reports" / SUMMARY_FILE
