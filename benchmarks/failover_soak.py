"""Runs the failover suite N times and prints ONE JSON line: how many runs passed, why
the others failed (an SLO verdict, the runner-too-busy verdict, anything else), and per
test the p50 / p95 / max of every gated metric and of the harness's own timing error,
beside the bound each was gated at. The suite's default budgets come from this.

The reference, measured in the same run: pgbench's TPS (8 clients, the suite's
transaction) on a scratch primary, so a soak from a slower machine reads against its
own speed; `headroom` is the largest measured/bound ratio seen for an upper bound.

    python benchmarks/failover_soak.py [--runs 20] [--busy] [--keep-runs DIR] [-- PYTEST ARGS]

--busy starts one busy loop per core beside the suite (a CI runner shared with other
jobs, or a machine half as fast).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchlib import pgbench_tps, scratch_cluster

ROOT = Path(__file__).resolve().parent.parent
SUMMARY = ROOT / "reports" / "pgha-summary.json"
SUITE_ARGS = ["suites/failover", "-n", "4", "-p", "no:cacheprovider", "-q", "-rfE"]
# Figures worth a distribution even where no SLO gates them.
ALWAYS = (
    "writes_resume_ms",
    "recovery_ms",
    "detect_ms",
    "harness_lag_ms_max",
    "harness_lag_ms_p99",
    "workload_lag_ms_max",
    "server_resume_ms",
)
TOO_BUSY = "runner was too busy"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile: a value that was actually measured."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def run_suite(extra: list[str]) -> tuple[int, float, str, dict[str, Any] | None]:
    SUMMARY.unlink(missing_ok=True)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *SUITE_ARGS, *extra],
        cwd=ROOT,
        # This checkout's package, not whichever one pip installed in editable mode.
        # CI=true: pytest prints each failure's whole message, which tells the causes apart.
        env={**os.environ, "PYTHONPATH": str(ROOT), "CI": "true"},
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    summary = json.loads(SUMMARY.read_text()) if SUMMARY.exists() else None
    return done.returncode, wall, done.stdout + done.stderr, summary


def failures_of(output: str) -> list[tuple[str, str]]:
    """(test, cause) of each FAILED/ERROR line of pytest's short summary."""
    found = []
    for line in output.splitlines():
        match = re.match(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$", line)
        if match:
            message = match.group(3) or ""
            if TOO_BUSY in message:
                cause = "too_busy"
            elif "SLOs failed" in message:
                cause = "slo"
            else:
                cause = "other"
            found.append((match.group(2), cause))
    return found


Series = dict[str, dict[str, list[float]]]


def collect(summary: dict[str, Any], values: Series, bounds: Any) -> None:
    latest = {entry["nodeid"]: entry for entry in summary.get("tests", [])}
    for nodeid, entry in latest.items():
        metrics = entry.get("metrics", {})
        gated = {r["metric"]: r for r in entry.get("slo_results", [])}
        for name in sorted(set(gated) | set(ALWAYS)):
            value = metrics.get(name, gated.get(name, {}).get("measured"))
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values[nodeid][name].append(float(value))
            if name in gated:
                bounds[nodeid][name] = (gated[name]["op"], gated[name]["bound"])


def distributions(values: Series, bounds: Any) -> dict[str, Any]:
    tests: dict[str, Any] = {}
    for nodeid in sorted(values):
        figures = {}
        for name, series in sorted(values[nodeid].items()):
            figure: dict[str, Any] = {
                "n": len(series),
                "p50": percentile(series, 50),
                "p95": percentile(series, 95),
                "max": max(series),
            }
            if name in bounds[nodeid]:
                figure["bound"] = " ".join(str(x) for x in bounds[nodeid][name])
            figures[name] = figure
        tests[nodeid] = figures
    return tests


def headroom(values: Series, bounds: Any) -> float | None:
    ratios = [
        max(values[nodeid][name]) / bound
        for nodeid, named in bounds.items()
        for name, (op, bound) in named.items()
        if op in ("<=", "<") and bound > 0 and values[nodeid].get(name)
    ]
    return round(max(ratios), 3) if ratios else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--busy", action="store_true", help="one busy loop per core beside")
    parser.add_argument("--keep-runs", type=Path, default=None, help="copy each run's summary")
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    with scratch_cluster("soak-reference") as cluster:
        reference_tps, _ = pgbench_tps(cluster, clients=8, seconds=5)
    busy: list[subprocess.Popen[bytes]] = []
    if args.busy:
        # Sessions of their own, as another job's processes on a shared runner are.
        busy = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(os.cpu_count() or 1)
        ]
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    bounds: dict[str, dict[str, tuple[str, float]]] = defaultdict(dict)
    causes: dict[str, int] = defaultdict(int)
    failed_tests: dict[str, list[str]] = defaultdict(list)
    passed_runs, walls = 0, []
    try:
        for run in range(args.runs):
            code, wall, output, summary = run_suite(args.pytest_args)
            walls.append(wall)
            passed_runs += code == 0
            for nodeid, cause in failures_of(output):
                causes[cause] += 1
                failed_tests[nodeid].append(cause)
            if code not in (0, 1):
                causes[f"pytest_exit_{code}"] += 1
            if summary is not None:
                collect(summary, values, bounds)
                if args.keep_runs:
                    args.keep_runs.mkdir(parents=True, exist_ok=True)
                    shutil.copy(SUMMARY, args.keep_runs / f"run-{run:02d}.json")
            if args.keep_runs and code != 0:
                args.keep_runs.mkdir(parents=True, exist_ok=True)
                (args.keep_runs / f"run-{run:02d}.out").write_text(output)
            print(f"run {run + 1}/{args.runs}: exit {code} in {wall:.0f}s", file=sys.stderr)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    print(
        json.dumps(
            {
                "benchmark": "failover_soak",
                "runs": args.runs,
                "busy_processes": len(busy),
                "passed_runs": passed_runs,
                "pass_rate": round(passed_runs / args.runs, 3),
                "failures": dict(causes),
                "failed_tests": dict(failed_tests),
                "reference_pgbench_tps": round(reference_tps, 1),
                "wall_s_median": round(percentile(walls, 50), 1),
                "headroom": headroom(values, bounds),
                "tests": distributions(values, bounds),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
