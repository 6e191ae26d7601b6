"""Jepsen's error model applied to one transaction attempt.

An error the server definitely returned (read-only 25006, serialization 40001,
deadlock 40P01, ...) before or at COMMIT means the transaction did not commit: a
failure. A connection that broke while COMMIT was in flight leaves the outcome
unknown: indeterminate, to be resolved with txid_status, never counted as failed.
"""

from __future__ import annotations

from pytest_pgha.workload.records import Outcome

# Class 08 (connection exception) and 57P0x (the server went away) say nothing
# about whether a COMMIT in flight was applied before the end.
_CONNECTION_LOSS_PREFIXES = ("08", "57P01", "57P02", "57P03", "57P04", "57P05")


def classify(stage: str, sqlstate: str | None, connection_broken: bool) -> Outcome:
    """stage is the statement that failed: "begin", "update" or "commit"."""
    if stage != "commit":
        return Outcome.FAILED
    lost = sqlstate is None or sqlstate.startswith(_CONNECTION_LOSS_PREFIXES)
    return Outcome.INDETERMINATE if (lost or connection_broken) else Outcome.FAILED
