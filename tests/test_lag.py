"""The harness's timing-error meter: what it records and how it summarises."""

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_pgha.lag import (
    AUTOGROUP,
    INSTRUMENT_NICENESS,
    WORKLOAD_NICENESS,
    Heartbeat,
    LagMeter,
    LagSummary,
    prioritise,
    prioritise_session,
    restore_session,
    share_session_priority,
)


def test_summary_gives_max_p99_and_the_largest_per_source():
    samples = [("heartbeat", i, i * 1_000_000) for i in range(1, 101)]  # 1..100 ms
    samples.append(("detect", 0, 250_000))
    summary = LagSummary.of(samples)
    assert summary.max_ms == 100.0
    assert summary.p99_ms == 99.0  # nearest rank over 101 samples
    assert summary.samples == 101
    assert summary.by_source_max_ms == {"detect": 0.2, "heartbeat": 100.0}


def test_an_empty_window_has_no_figures():
    assert LagSummary.of([]) == LagSummary(None, None, 0)


def test_a_wait_records_its_lateness_and_a_stopped_one_nothing():
    meter = LagMeter()
    assert meter.sleep_until(time.monotonic_ns() + 2_000_000, "probe") is False
    stop = threading.Event()
    stop.set()
    assert meter.sleep_until(time.monotonic_ns() + 10_000_000, "sample", stop) is True
    [(source, _, lateness)] = meter.samples()
    assert source == "probe" and lateness >= 0


def test_an_overdue_plan_counts_only_when_asked():
    meter = LagMeter()
    past = time.monotonic_ns() - 30_000_000
    meter.sleep_until(past, "sample")
    assert meter.samples() == []
    meter.sleep_until(past, "detect", overdue_counts=True)
    [(source, _, lateness)] = meter.samples()
    assert source == "detect" and lateness >= 30_000_000


def test_the_window_selects_samples_by_time():
    meter = LagMeter()
    for at in (10, 20, 30):
        meter.record("heartbeat", at, at_ns=at)
    assert [s[1] for s in meter.samples(15, 30)] == [20, 30]
    assert meter.summary(15, 25).samples == 1


def test_the_heartbeat_ticks_while_it_runs():
    meter = LagMeter()
    with Heartbeat(meter, interval_s=0.005):
        time.sleep(0.1)
    ticks = meter.samples()
    assert len(ticks) >= 5 and {s[0] for s in ticks} == {"heartbeat"}
    count = len(ticks)
    time.sleep(0.03)
    assert len(meter.samples()) == count  # stopped with the block


def test_prioritise_reports_whether_it_could():
    result = {}
    thread = threading.Thread(target=lambda: result.update(done=prioritise(-1)))
    thread.start()
    thread.join()
    assert result["done"] is (os.geteuid() == 0)


def test_a_proxy_session_ranks_with_the_workload_below_the_instruments() -> None:
    if not AUTOGROUP.exists() or os.geteuid() != 0:
        pytest.skip("needs autogroup scheduling and root (CAP_SYS_NICE)")
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    child = subprocess.Popen(sleeper, start_new_session=True)
    try:
        previous = prioritise_session(INSTRUMENT_NICENESS)
        try:
            assert share_session_priority(child.pid)
        finally:
            restore_session(previous)
        theirs = int(Path(f"/proc/{child.pid}/autogroup").read_text().split()[-1])
        assert theirs == min(0, INSTRUMENT_NICENESS + 5) == WORKLOAD_NICENESS
    finally:
        child.kill()
        child.wait()


def test_a_harness_in_the_root_autogroup_still_ranks_a_proxy_with_the_workload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CI runner that init forked without setsid() lives in the root autogroup,
    whose /proc file is empty: its threads compete on their own niceness, so the
    proxy still goes to the workload's."""
    if not AUTOGROUP.exists() or os.geteuid() != 0:
        pytest.skip("needs autogroup scheduling and root (CAP_SYS_NICE)")
    root_autogroup = tmp_path / "autogroup"
    root_autogroup.write_text("")
    monkeypatch.setattr("pytest_pgha.lag.AUTOGROUP", root_autogroup)
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    child = subprocess.Popen(sleeper, start_new_session=True)
    try:
        assert share_session_priority(child.pid)
        theirs = int(Path(f"/proc/{child.pid}/autogroup").read_text().split()[-1])
        assert theirs == WORKLOAD_NICENESS
    finally:
        child.kill()
        child.wait()


RAPID_SHARES = """
import subprocess, sys
from pytest_pgha.lag import share_session_priority
children = [
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    for _ in range(3)
]
try:
    print([share_session_priority(child.pid) for child in children])
finally:
    for child in children:
        child.kill()
"""


def test_sharing_priority_waits_out_the_kernels_rate_limit() -> None:
    """Without CAP_SYS_ADMIN the kernel refuses a second autogroup change within
    100 ms (EAGAIN): proxies started back to back must still get their priority."""
    if not AUTOGROUP.exists() or os.geteuid() != 0:
        pytest.skip("needs autogroup scheduling and root (CAP_SYS_NICE)")
    capsh = shutil.which("capsh")
    if capsh is None:
        pytest.skip("needs capsh: apt-get install libcap2-bin")
    command = f"{sys.executable} -c '{RAPID_SHARES}'"
    done = subprocess.run(
        [capsh, "--drop=cap_sys_admin", "--", "-c", command],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[True, True, True]"
