"""Whether a stopped node diverged from a new primary's timeline (pure, no server)."""

from __future__ import annotations

from pytest_pgha.cluster.timelines import WalEnd, diverged, switch_points, wal_end

# Timeline 3's history: 1 -> 2 at 0/3000120, 2 -> 3 at 0/5000A8.
HISTORY_3 = (
    "1\t0/3000120\tno recovery target specified\n\n2\t0/5000A8\tno recovery target specified\n"
)


def controldata(state: str, **fields: str) -> dict[str, str]:
    return {
        "Database cluster state": state,
        "Latest checkpoint location": "0/4000028",
        "Latest checkpoint's TimeLineID": "2",
        "Minimum recovery ending location": "0/0",
        "Min recovery ending loc's timeline": "0",
        **fields,
    }


def test_history_lists_each_ancestor_and_where_its_child_left_it() -> None:
    assert switch_points(HISTORY_3) == {1: 0x3000120, 2: 0x5000A8}


def test_a_standby_ends_at_its_minimum_recovery_point_on_that_points_timeline() -> None:
    """A standby that followed a promotion but replayed no checkpoint on the new
    timeline yet: its checkpoint says timeline 2, its WAL is on 3 (what misleads
    pg_rewind before PostgreSQL 16)."""
    control = controldata(
        "shut down in recovery",
        **{
            "Minimum recovery ending location": "0/6000100",
            "Min recovery ending loc's timeline": "3",
        },
    )
    assert wal_end(control) == WalEnd(3, 0x6000100, own_record=False)
    assert not diverged(wal_end(control), 3, HISTORY_3)


def test_a_primary_ends_at_its_checkpoint_which_is_its_own_record() -> None:
    assert wal_end(controldata("shut down")) == WalEnd(2, 0x4000028, own_record=True)
    # A standby that crashed as a primary never set a minimum recovery point.
    assert wal_end(controldata("shut down in recovery")) == WalEnd(2, 0x4000028, own_record=True)


def test_an_old_primary_whose_shutdown_checkpoint_the_standby_replayed_can_follow() -> None:
    """A planned switchover: the standby replayed the shutdown checkpoint, its
    timeline starts where that record ends."""
    assert not diverged(WalEnd(2, 0x5000A8 - 0x70, own_record=True), 3, HISTORY_3)


def test_a_node_with_wal_past_the_switch_point_diverged() -> None:
    assert diverged(WalEnd(2, 0x5000A8, own_record=True), 3, HISTORY_3)
    assert diverged(WalEnd(2, 0x5000A9, own_record=False), 3, HISTORY_3)
    assert not diverged(WalEnd(2, 0x5000A8, own_record=False), 3, HISTORY_3)
    assert not diverged(WalEnd(1, 0x3000000, own_record=False), 3, HISTORY_3)
    assert diverged(WalEnd(1, 0x3000200, own_record=False), 3, HISTORY_3)


def test_a_node_on_a_later_or_foreign_timeline_diverged() -> None:
    assert diverged(WalEnd(4, 0x100, own_record=False), 3, HISTORY_3)
    assert diverged(WalEnd(5, 0x100, own_record=False), 6, "4\t0/100\tx\n")
    assert not diverged(WalEnd(3, 0x9000000, own_record=False), 3, HISTORY_3)
