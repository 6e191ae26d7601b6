"""SLO judging end to end, on real clusters behind the `direct` proxy: bounds from the
marker, the ini file and --pgha-slo are judged on a real failover, the verdict fails
or passes the test with the table, and the run summary (terminal section and
reports/pgha-summary.json) lists every result; with pytest-xdist too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from plugin_helpers import (
    TRIAL,
    assert_clean,
    entries_by_nodeid,
    output,
    run,
    summary,
    terminal_section,
)

# A timing figure carries its trial's timing error in the terminal summary.
TIMING_ERROR = r" \(harness timing error <= [\d.]+ ms\)"

MARKED = f"""
import pytest


@pytest.mark.slo(writes_resume_ms="<= 1")
def test_failover(pgha_failover):
    pgha_failover.failover({TRIAL})
"""

UNMARKED = f"""
def test_failover(pgha_failover):
    result = pgha_failover.failover({TRIAL})
    assert result.new_primary is not None
"""

TABLE_HEADER = re.compile(r"metric\s+\|\s+measured\s+\|\s+bound\s+\|\s+result")


def table_row(source: str, bound: str, verdict: str) -> re.Pattern[str]:
    return re.compile(
        rf"writes_resume_ms\s+\|\s+\d+\s+\|\s+{re.escape(bound)} \[{source}\]\s+\|\s+{verdict}"
    )


def only_entry(pytester: pytest.Pytester, nodeid: str) -> tuple[dict, dict]:
    data = summary(pytester)
    entries = entries_by_nodeid(data)
    assert list(entries) == [nodeid]
    return data, entries[nodeid]


def test_marker_bound_fails_the_test_with_the_table(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(test_slo=MARKED)
    result = run(pytester, run_basedir, "--pgha-proxies=direct")
    text = output(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text
    result.assert_outcomes(failed=1)
    assert "1 of 1 SLOs failed" in text
    assert TABLE_HEADER.search(text), text
    assert table_row("marker", "<= 1", "FAIL").search(text), text

    section = terminal_section(result)
    nodeid = "test_slo.py::test_failover[direct]"
    verdicts = [line for line in section if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) == 1, section
    expected = rf"FAIL {re.escape(nodeid)} writes_resume_ms \d+ ms <= 1 ms{TIMING_ERROR}"
    assert re.fullmatch(expected, verdicts[0]), verdicts
    assert any(
        line.startswith("summary: ") and line.endswith("reports/pgha-summary.json")
        for line in section
    ), section

    data, entry = only_entry(pytester, nodeid)
    assert data["slo"] == {"passed": 0, "failed": 1}
    [slo] = entry["slo_results"]
    assert slo["metric"] == "writes_resume_ms" and slo["op"] == "<="
    assert slo["bound"] == 1 and slo["source"] == "marker" and slo["passed"] is False
    # The measured value is the one the metrics hold: a real stall of the failover.
    assert slo["measured"] == entry["metrics"]["writes_resume_ms"]
    assert slo["measured"] > 1
    assert entry["parameters"]["proxy"] == "direct"
    assert entry["parameters"]["fault"] == "kill_primary"
    assert entry["metrics"]["detect_ms"] >= 500
    assert_clean(run_basedir)


def test_command_line_bound_overrides_the_marker(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(test_slo=MARKED)
    result = run(
        pytester, run_basedir, "--pgha-proxies=direct", "--pgha-slo", "writes_resume_ms<=5000"
    )
    text = output(result)
    assert result.ret == pytest.ExitCode.OK, text
    result.assert_outcomes(passed=1)

    nodeid = "test_slo.py::test_failover[direct]"
    section = terminal_section(result)
    verdicts = [line for line in section if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) == 1, section
    expected = rf"PASS {re.escape(nodeid)} writes_resume_ms \d+ ms <= 5000 ms{TIMING_ERROR}"
    assert re.fullmatch(expected, verdicts[0]), verdicts

    data, entry = only_entry(pytester, nodeid)
    assert data["slo"] == {"passed": 1, "failed": 0}
    # The marker's bound on the same metric is replaced, not judged as well.
    [slo] = entry["slo_results"]
    assert (slo["source"], slo["bound"], slo["passed"]) == ("cli", 5000, True)
    assert 0 < slo["measured"] <= 5000
    assert_clean(run_basedir)


def test_ini_bound_fails_an_unmarked_test(pytester: pytest.Pytester, run_basedir: Path) -> None:
    pytester.makeini("[pytest]\npgha_slo = writes_resume_ms<=1\npgha_proxies = direct\n")
    pytester.makepyfile(test_slo=UNMARKED)
    result = run(pytester, run_basedir)
    text = output(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text
    result.assert_outcomes(failed=1)
    assert TABLE_HEADER.search(text), text
    assert table_row("ini", "<= 1", "FAIL").search(text), text

    nodeid = "test_slo.py::test_failover[direct]"
    section = terminal_section(result)
    assert any(line.startswith(f"FAIL {nodeid} writes_resume_ms ") for line in section), section
    data, entry = only_entry(pytester, nodeid)
    assert data["slo"] == {"passed": 0, "failed": 1}
    assert [r["source"] for r in entry["slo_results"]] == ["ini"]
    assert_clean(run_basedir)


def test_xdist_workers_entries_merge_into_one_summary(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(
        test_one=f"""
        import pytest

        @pytest.mark.slo(writes_resume_ms="<= 5000", workers="== 8")
        def test_first(pgha_failover):
            pgha_failover.failover({TRIAL})
        """,
        test_two=f"""
        import pytest

        @pytest.mark.slo(writes_resume_ms="<= 1")
        def test_second(pgha_failover):
            pgha_failover.failover({TRIAL})
        """,
    )
    result = run(pytester, run_basedir, "-n", "2", "--pgha-proxies=direct")
    text = output(result)
    assert "2 workers [2 items]" in text, text
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text
    result.assert_outcomes(passed=1, failed=1)

    first, second = "test_one.py::test_first[direct]", "test_two.py::test_second[direct]"
    data = summary(pytester)
    entries = entries_by_nodeid(data)
    assert set(entries) == {first, second}
    assert data["slo"] == {"passed": 2, "failed": 1}
    assert [r["passed"] for r in entries[first]["slo_results"]] == [True, True]
    assert [r["passed"] for r in entries[second]["slo_results"]] == [False]
    for entry in entries.values():
        assert entry["metrics"]["workers"] == 8
        assert entry["parameters"]["proxy"] == "direct"

    # The controller prints them too, once each.
    verdicts = [line for line in terminal_section(result) if line.startswith(("PASS", "FAIL"))]
    assert sorted(" ".join(line.split()[:3]) for line in verdicts) == [
        f"FAIL {second} writes_resume_ms",
        f"PASS {first} workers",
        f"PASS {first} writes_resume_ms",
    ]
    assert_clean(run_basedir)


def test_pgha_slo_fixture_checks_from_code(pytester: pytest.Pytester, run_basedir: Path) -> None:
    pytester.makepyfile(
        test_code="""
        import pytest
        from pytest_pgha.errors import PghaConfigError

        METRICS = {"writes_resume_ms": 100, "workers": 8}

        def test_violated(pgha_slo):
            pgha_slo.check(METRICS, writes_resume_ms="<= 50")

        def test_met(pgha_slo):
            results = pgha_slo.check(METRICS, writes_resume_ms="<= 20*workers")
            assert [(r.bound, r.passed) for r in results] == [(160, True)]

        def test_bare_number_is_refused(pgha_slo):
            with pytest.raises(PghaConfigError, match="write it as a string like '<= 50'"):
                pgha_slo.check(METRICS, writes_resume_ms=50)

        def test_no_check_no_entry(pgha_slo):
            pass
        """
    )
    result = run(pytester, run_basedir)
    text = output(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text
    result.assert_outcomes(passed=3, failed=1)
    assert "SloViolation: 1 of 1 SLOs failed" in text
    assert TABLE_HEADER.search(text), text
    assert re.search(r"writes_resume_ms\s+\|\s+100\s+\|\s+<= 50 \[code\]\s+\|\s+FAIL", text), text

    data = summary(pytester)
    entries = entries_by_nodeid(data)
    assert set(entries) == {"test_code.py::test_violated", "test_code.py::test_met"}
    assert data["slo"] == {"passed": 1, "failed": 1}
    met = entries["test_code.py::test_met"]["slo_results"]
    assert [(r["metric"], r["bound"], r["bound_expr"], r["passed"], r["source"]) for r in met] == [
        ("writes_resume_ms", 160, "20*workers", True, "code")
    ]
    section = terminal_section(result)
    assert "PASS test_code.py::test_met writes_resume_ms 100 ms <= 160 ms" in section
    assert "FAIL test_code.py::test_violated writes_resume_ms 100 ms <= 50 ms" in section


def test_marker_and_code_checks_of_one_trial_share_its_entry(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(
        test_both=f"""
        import pytest

        @pytest.mark.slo(workers_lost="== 0")
        def test_failover(pgha_failover, pgha_slo):
            result = pgha_failover.failover({TRIAL})
            pgha_slo.check(result.metrics, writes_resume_ms="<= 60000")
        """
    )
    result = run(pytester, run_basedir, "--pgha-proxies=direct")
    assert result.ret == pytest.ExitCode.OK, output(result)
    _, entry = only_entry(pytester, "test_both.py::test_failover[direct]")
    assert [(r["metric"], r["source"]) for r in entry["slo_results"]] == [
        ("workers_lost", "marker"),
        ("writes_resume_ms", "code"),
    ]
    assert entry["metrics"]["writes_resume_ms"] > 0
    assert entry["parameters"]["proxy"] == "direct"
