"""Whether a stopped node's WAL diverged from a new primary's timeline, the way
Patroni decides before it runs pg_rewind ("Patroni: rewind.py, _check_timeline_and_lsn"):
compare where the node's WAL ends with the point where the primary's timeline history
left the node's timeline.

pg_rewind alone cannot be asked: before PostgreSQL 16 it takes the target's timeline
from its last checkpoint, so a standby that had followed a promotion but not yet replayed
a checkpoint on the new timeline looks diverged, and pg_rewind fails reading WAL the old
timeline's file never had ("could not find previous WAL record").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pytest_pgha.cluster.lsn import int_to_lsn, lsn_to_int

IN_RECOVERY_STATES = ("shut down in recovery", "in archive recovery")


@dataclass(frozen=True)
class WalEnd:
    """Where a stopped node's WAL ends: on which timeline, at which LSN, and whether
    that LSN is the start of a shutdown checkpoint the node wrote (a record of its own
    at that position) or the end of what a standby replayed."""

    timeline: int
    lsn: int
    own_record: bool

    def __str__(self) -> str:
        return f"timeline {self.timeline} at {int_to_lsn(self.lsn)}"


def wal_end(control: Mapping[str, str]) -> WalEnd:
    """From pg_controldata's fields. A standby's end is its minimum recovery point; a
    primary (or a standby that never recorded one) ends at its last checkpoint."""
    if control.get("Database cluster state") in IN_RECOVERY_STATES:
        lsn = lsn_to_int(control.get("Minimum recovery ending location"))
        timeline = int(control.get("Min recovery ending loc's timeline", "0"))
        if lsn and timeline:
            return WalEnd(timeline, lsn, own_record=False)
    lsn = lsn_to_int(control["Latest checkpoint location"])
    assert lsn is not None
    return WalEnd(int(control["Latest checkpoint's TimeLineID"]), lsn, own_record=True)


def switch_points(history: str) -> dict[int, int]:
    """A timeline history file ("parent TLI <tab> switch LSN <tab> reason" per line):
    each ancestor timeline and the LSN where its child left it."""
    points: dict[int, int] = {}
    for line in history.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0].isdigit():
            lsn = lsn_to_int(fields[1])
            assert lsn is not None
            points[int(fields[0])] = lsn
    return points


def diverged(local: WalEnd, primary_timeline: int, history: str) -> bool:
    """Whether the node holds WAL the primary's history does not: then it cannot
    follow, and needs pg_rewind."""
    if local.timeline == primary_timeline:
        return False
    if local.timeline > primary_timeline:
        return True
    switch = switch_points(history).get(local.timeline)
    if switch is None:
        return True  # the node's timeline is no ancestor of the primary's
    return local.lsn >= switch if local.own_record else local.lsn > switch
