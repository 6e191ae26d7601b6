"""A run stops what it started: after it, no PostgreSQL or proxy process of the run
lives and no run directory remains, whether its tests passed or failed mid-trial.

The inner tests record the processes of their run while it is up (pid and start
time), so the check covers those very processes as well as a scan of every process
whose command line or working directory mentions the run's basedir."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_helpers import PROCS_SOURCE, TRIAL, assert_clean, output, run, still_alive

SEEN = "seen_processes.json"


def recorded(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / SEEN
    assert path.is_file(), "the inner tests recorded no processes"
    seen: list[dict] = json.loads(path.read_text())
    return seen


def test_cluster_and_pgbouncer_are_gone_after_the_run(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(pgha_procs=PROCS_SOURCE)
    pytester.makepyfile(
        test_stack=f"""
        import psycopg

        import pgha_procs


        def test_query_through_pgbouncer(pgha_stack, pgha_proxy_kind):
            assert pgha_proxy_kind == "pgbouncer"
            with psycopg.connect(pgha_stack.rw_dsn, connect_timeout=5) as conn:
                assert conn.execute("select 1").fetchone() == (1,)
            pgha_procs.record({str(run_basedir)!r}, {SEEN!r})
        """
    )
    result = run(pytester, run_basedir, "--pgha-proxies=pgbouncer")
    assert result.ret == pytest.ExitCode.OK, output(result)
    result.assert_outcomes(passed=1)

    seen = recorded(pytester)
    names = {entry["name"] for entry in seen}
    assert {"postgres", "pgbouncer"} <= names, seen
    # 1 primary + 2 replicas, each a postmaster with children.
    assert sum(entry["name"] == "postgres" for entry in seen) >= 3, seen
    assert still_alive(seen) == []
    assert_clean(run_basedir)


def test_nothing_is_left_when_tests_fail_mid_trial(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(pgha_procs=PROCS_SOURCE)
    pytester.makepyfile(
        test_failing=f"""
        import pytest

        import pgha_procs
        from pytest_pgha.ha.scripted import ScriptedHA

        BASEDIR = {str(run_basedir)!r}


        def test_raises_after_the_cluster_started(pgha_stack):
            assert pgha_stack.cluster.primary.sql("select 1") == [(1,)]
            pgha_procs.record(BASEDIR, {SEEN!r})
            raise RuntimeError("boom after the cluster started")


        def test_raises_inside_the_failover(pgha_failover, monkeypatch):
            pgha_procs.record(BASEDIR, {SEEN!r})

            def wait(self, timeout):
                # The primary was just killed and the HA thread is promoting,
                # while the workload reconnects: give up right there.
                pgha_procs.record(BASEDIR, {SEEN!r})
                raise RuntimeError("boom in the middle of the failover")

            monkeypatch.setattr(ScriptedHA, "wait", wait)
            pgha_failover.failover({TRIAL})
        """
    )
    result = run(pytester, run_basedir, "--pgha-proxies=direct")
    text = output(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text
    result.assert_outcomes(failed=2)
    assert "boom after the cluster started" in text
    assert "boom in the middle of the failover" in text

    seen = recorded(pytester)
    assert sum(entry["name"] == "postgres" for entry in seen) >= 6, seen
    assert still_alive(seen) == []
    assert_clean(run_basedir)


def test_kept_runs_are_listed_and_survive_later_runs_until_cleanup(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(
        test_keep="""
        import pytest

        @pytest.mark.pgha_cluster(replicas=0)
        def test_keep(pgha_cluster):
            pgha_cluster.primary.sql("SELECT 1")
        """
    )
    kept = run(pytester, run_basedir, "--pgha-keep")
    assert kept.ret == pytest.ExitCode.OK, output(kept)
    lines = kept.outlines
    start = next(i for i, line in enumerate(lines) if "pytest-pgha kept" in line)
    (path,) = [Path(line.strip()) for line in lines[start:] if line.startswith("/")]
    assert path.name.startswith("test_keep") and (path / "node0" / "PG_VERSION").is_file()
    assert "`pgha cleanup` removes them" in "\n".join(lines[start:])

    later = run(pytester, run_basedir)  # an ordinary run reaps orphans first
    assert later.ret == pytest.ExitCode.OK, output(later)
    assert path.is_dir(), "an ordinary run removed a kept run"

    cleanup = subprocess.run(
        [sys.executable, "-m", "pytest_pgha.cli", "cleanup", "--basedir", str(run_basedir)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert not path.exists(), cleanup.stdout
