"""Bad options, ini values and slo markers are pytest usage errors (exit code 4) with
one message that names what is wrong and how to fix it, and no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from plugin_helpers import assert_usage_error, output, run

PLAIN_TEST = "def test_nothing():\n    pass\n"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(
            ["--pgha-bucket-ms=abc"],
            ["--pgha-bucket-ms", "'abc'", "whole number of milliseconds from 10 to 1000"],
            id="bucket-not-a-number",
        ),
        pytest.param(
            ["--pgha-bucket-ms=5"],
            ["--pgha-bucket-ms", "'5'", "from 10 to 1000"],
            id="bucket-too-small",
        ),
        pytest.param(
            ["--pgha-proxies=bogus"],
            ["--pgha-proxies", "'bogus'", "known: direct, pgbouncer, haproxy"],
            id="unknown-proxy",
        ),
        pytest.param(
            ["--pgha-proxies=pgpol"],
            ["--pgha-proxies", "unknown proxy kind 'pgpol'", "did you mean pgpool"],
            id="proxy-typo-gets-suggestion",
        ),
        pytest.param(
            ["--pgha-proxies=direct,,bogus"],
            ["--pgha-proxies", "bogus", "known:"],
            id="unknown-proxy-in-list",
        ),
        pytest.param(
            ["--pgha-slo", "writes_resume_ms<<3"],
            ["'writes_resume_ms<<3'", "expected an operator (<=, >=", "'N*workers'"],
            id="slo-bad-operator",
        ),
        pytest.param(
            ["--pgha-slo", "nonsense_metric<=3"],
            ["'nonsense_metric<=3'", "unknown metric 'nonsense_metric'", "writes_resume_ms"],
            id="slo-unknown-metric",
        ),
        pytest.param(
            ["--pgha-slo", "writes_resume_msx<=3"],
            ["unknown metric 'writes_resume_msx'", "did you mean writes_resume_ms"],
            id="slo-typo-gets-suggestion",
        ),
        pytest.param(
            ["--pgha-slo", "writes_resume_ms<=2*workers", "--pgha-slo", "workers_lost=0"],
            ["'workers_lost=0'", "expected an operator"],
            id="slo-second-of-two-bad",
        ),
    ],
)
def test_bad_command_line_option_is_usage_error(
    pytester: pytest.Pytester, run_basedir: Path, args: list[str], expected: list[str]
) -> None:
    pytester.makepyfile(PLAIN_TEST)
    result = run(pytester, run_basedir, *args)
    assert_usage_error(result, *expected)
    # Refused before anything ran: no run directory was even made.
    assert not (run_basedir / "runs").exists() or not any((run_basedir / "runs").iterdir())


@pytest.mark.parametrize(
    ("ini", "expected"),
    [
        pytest.param(
            "pgha_slo =\n    writes_resume_ms<=1500\n    bogus_metric<=3\n",
            ["'bogus_metric<=3'", "unknown metric 'bogus_metric'", "writes_resume_ms"],
            id="slo-unknown-metric",
        ),
        pytest.param(
            "pgha_slo =\n    writes_resume_ms =< 1500\n",
            ["'writes_resume_ms =< 1500'", "expected an operator"],
            id="slo-bad-operator",
        ),
        pytest.param(
            "pgha_bucket_ms = abc\n",
            ["'abc'", "from 10 to 1000"],
            id="bucket",
        ),
    ],
)
def test_bad_ini_value_is_usage_error(
    pytester: pytest.Pytester, run_basedir: Path, ini: str, expected: list[str]
) -> None:
    pytester.makeini("[pytest]\n" + ini)
    pytester.makepyfile(PLAIN_TEST)
    result = run(pytester, run_basedir)
    assert_usage_error(result, *expected)


def test_valid_options_are_accepted(pytester: pytest.Pytester, run_basedir: Path) -> None:
    """The counterpart: well-formed values of every option run the tests."""
    pytester.makeini(
        "[pytest]\npgha_slo =\n    # a comment\n    writes_resume_ms <= 2*workers\n\n"
        "    error_count_post_inject<=workers*3\n"
    )
    pytester.makepyfile(PLAIN_TEST)
    result = run(
        pytester,
        run_basedir,
        "--pgha-bucket-ms=10",
        "--pgha-proxies=direct, pgbouncer",
        "--pgha-slo",
        "detect_ms>=0",
        "--pgha-slo",
        "reads_resume_ms < 1500.5",
    )
    assert result.ret == pytest.ExitCode.OK, output(result)
    result.assert_outcomes(passed=1)


def test_malformed_slo_markers_are_usage_error_naming_the_tests(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(
        test_markers="""
        import pytest

        @pytest.mark.slo(writes_resume_ms=1500)
        def test_bare_number():
            pass

        @pytest.mark.slo(nonsense_metric="<= 3")
        def test_unknown_metric():
            pass

        @pytest.mark.slo(writes_resume_ms="<= 1500")
        def test_well_formed():
            pass
        """
    )
    result = run(pytester, run_basedir)
    message = assert_usage_error(
        result,
        "test_markers.py::test_bare_number",
        "writes_resume_ms=1500",
        "write it as a string like '<= 1500'",
        "test_markers.py::test_unknown_metric",
        "unknown metric 'nonsense_metric'",
    )
    assert "test_well_formed" not in message
    # No test ran, and the run directory made at configure time is gone again.
    assert "passed" not in output(result)
    assert not any((run_basedir / "runs").iterdir())


def test_malformed_slo_marker_on_a_class_names_its_tests(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(
        test_class_marker="""
        import pytest

        @pytest.mark.slo(workers_lost="= 0")
        class TestSuite:
            def test_one(self):
                pass
        """
    )
    result = run(pytester, run_basedir)
    assert_usage_error(
        result,
        "test_class_marker.py::TestSuite::test_one",
        "workers_lost='= 0'",
        "expected an operator",
    )
