"""Faults injected into a running stack. Each records when it happened on the test's
timeline (both clocks) and leaves nothing behind: the cluster's and proxy's teardown
stop whatever a fault killed, froze or left half-started."""

from pytest_pgha.faults.inject import (
    FAULTS,
    Fault,
    crash_proxy,
    freeze_primary,
    kill_primary,
    kill_replica,
    restart_proxy,
    stop_primary,
    thaw,
)

__all__ = [
    "FAULTS",
    "Fault",
    "crash_proxy",
    "freeze_primary",
    "kill_primary",
    "kill_replica",
    "restart_proxy",
    "stop_primary",
    "thaw",
]
