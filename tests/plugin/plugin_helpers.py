"""Helpers of the plugin's end-to-end tests: run pytest in a subprocess with the
plugin, read what it wrote, and find the processes a run left behind.

Imported by module name (tests/ has no packages, as for tests/cluster)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import psutil
import pytest

# Each inner run is a real pytest session; one that hangs must not hang ours.
RUN_TIMEOUT_S = 180.0

# The seven proxy kinds the plugin knows, in the order it documents them.
ALL_KINDS = ("direct", "pgbouncer", "haproxy", "pgpool", "proxysql", "pgdog", "pgcat")

# A cheap, short failover trial: rate=500, short warmup and settle.
TRIAL = 'fault="kill_primary", detect_delay_s=0.5, warmup_s=1, settle_s=1, rate=500'

# Written next to inner tests that record the processes of their run, so that the
# outer test can check those very processes are gone (not only a command-line scan).
PROCS_SOURCE = '''
import json
import os

import psutil


def processes_under(basedir):
    """Living processes (but this pytest and its parents) whose command line or
    working directory mentions basedir."""
    me = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        if proc.pid in me or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            cwd = proc.cwd()
            started = proc.create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        text = " ".join(proc.info["cmdline"] or []) + " " + cwd
        if basedir in text:
            found.append({"pid": proc.pid, "name": proc.info["name"], "started": started})
    return found


def record(basedir, path):
    """Append the run's processes to the JSON list at path."""
    seen = json.loads(open(path).read()) if os.path.exists(path) else []
    seen.extend(processes_under(basedir))
    with open(path, "w") as out:
        out.write(json.dumps(seen))
'''


def run(pytester: pytest.Pytester, basedir: Path, *args: str) -> pytest.RunResult:
    """pytest in a subprocess, in pytester's directory, with its own sandbox basedir."""
    # Inner runs keep their order (pytest-randomly shuffles only the outer one).
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        f"--pgha-basedir={basedir}",
        *args,
        timeout=RUN_TIMEOUT_S,
    )


def output(result: pytest.RunResult) -> str:
    return "\n".join([*result.outlines, *result.errlines])


def assert_usage_error(result: pytest.RunResult, *expected: str) -> str:
    """Exit code 4, exactly one ERROR message holding every expected text, and no
    traceback of the plugin's code. Returns the message."""
    text = output(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1, text
    assert "Traceback" not in text, text
    assert not re.search(r"pytest_pgha[/\\]", text), text
    message = "\n".join(result.errlines)
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    return message


def collected_ids(result: pytest.RunResult) -> list[str]:
    """Node ids printed by --collect-only -q."""
    assert result.ret == pytest.ExitCode.OK, output(result)
    return [line.strip() for line in result.outlines if "::" in line]


def summary(pytester: pytest.Pytester) -> dict[str, Any]:
    """reports/pgha-summary.json under the inner run's rootdir."""
    path = pytester.path / "reports" / "pgha-summary.json"
    assert path.is_file(), f"no run summary at {path}"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def entries_by_nodeid(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    nodeids = [test["nodeid"] for test in data["tests"]]
    assert len(nodeids) == len(set(nodeids)), f"duplicate entries: {nodeids}"
    return {test["nodeid"]: test for test in data["tests"]}


def terminal_section(result: pytest.RunResult) -> list[str]:
    """The lines of the "pytest-pgha SLO results" section."""
    lines = result.outlines
    starts = [i for i, line in enumerate(lines) if "pytest-pgha SLO results" in line]
    assert len(starts) == 1, output(result)
    section = []
    for line in lines[starts[0] + 1 :]:
        if line.startswith("=") or line.startswith("_"):
            break
        section.append(line)
    return section


def processes_under(basedir: Path) -> list[psutil.Process]:
    """Living processes whose command line or working directory mentions basedir."""
    needles = {str(basedir), str(basedir.resolve())}
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            text = " ".join(proc.info["cmdline"] or []) + " " + proc.cwd()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if any(needle in text for needle in needles):
            found.append(proc)
    return found


def describe(procs: list[psutil.Process]) -> list[str]:
    described = []
    for proc in procs:
        try:
            described.append(f"{proc.pid} {' '.join(proc.cmdline())} (cwd {proc.cwd()})")
        except psutil.Error:
            described.append(f"{proc.pid} (gone)")
    return described


def still_alive(recorded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded processes (pid + start time, so a reused pid does not count) that
    still run."""
    alive = []
    for entry in recorded:
        try:
            proc = psutil.Process(entry["pid"])
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if abs(proc.create_time() - entry["started"]) < 1.0:
                alive.append(entry)
        except psutil.NoSuchProcess:
            continue
    return alive


def assert_clean(basedir: Path) -> None:
    """Nothing of the run is left: no process mentions the basedir, no run directory
    remains under runs/."""
    left = processes_under(basedir)
    assert not left, "processes left behind:\n" + "\n".join(describe(left))
    runs = basedir / "runs"
    remaining = sorted(p.name for p in runs.iterdir()) if runs.exists() else []
    assert remaining == [], f"run directories left under {runs}: {remaining}"
