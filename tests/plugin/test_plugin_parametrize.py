"""Tests that use pgha_proxy_kind run once per selected proxy kind, unless they pin or
parametrize the kind themselves; a proxy that is not installed skips with its install
route."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from plugin_helpers import ALL_KINDS, collected_ids, output, run

# Where the plugin looks for proxy programs beside PATH.
SBIN_DIRS = "/usr/sbin:/usr/local/bin:/usr/local/sbin"

KIND_TESTS = """
import pytest


def test_kind(pgha_proxy_kind):
    pass


def test_without_proxy():
    pass


class TestGroup:
    def test_in_class(self, pgha_proxy_kind):
        pass
"""


def test_one_item_per_selected_kind(pytester: pytest.Pytester, run_basedir: Path) -> None:
    pytester.makepyfile(test_kinds=KIND_TESTS)
    ids = collected_ids(
        run(pytester, run_basedir, "--collect-only", "-q", "--pgha-proxies=direct,pgbouncer")
    )
    assert ids == [
        "test_kinds.py::test_kind[direct]",
        "test_kinds.py::test_kind[pgbouncer]",
        "test_kinds.py::test_without_proxy",
        "test_kinds.py::TestGroup::test_in_class[direct]",
        "test_kinds.py::TestGroup::test_in_class[pgbouncer]",
    ]


def test_all_seven_kinds_by_default(pytester: pytest.Pytester, run_basedir: Path) -> None:
    pytester.makepyfile(test_kinds=KIND_TESTS)
    ids = collected_ids(run(pytester, run_basedir, "--collect-only", "-q"))
    assert [i for i in ids if "::test_kind[" in i] == [
        f"test_kinds.py::test_kind[{kind}]" for kind in ALL_KINDS
    ]
    assert len(ids) == 2 * len(ALL_KINDS) + 1


def test_fixtures_built_on_the_kind_are_parametrized_too(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    """A test reaching pgha_proxy_kind only through pgha_failover (pgha_stack ->
    pgha_proxy -> pgha_proxy_kind) is parametrized all the same."""
    pytester.makepyfile(
        test_scenario="""
        def test_failover(pgha_failover):
            pass
        """
    )
    ids = collected_ids(
        run(pytester, run_basedir, "--collect-only", "-q", "--pgha-proxies=haproxy,direct")
    )
    assert ids == [
        "test_scenario.py::test_failover[haproxy]",
        "test_scenario.py::test_failover[direct]",
    ]


def test_ini_selects_kinds_and_command_line_wins(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makeini("[pytest]\npgha_proxies = pgcat, haproxy\n")
    pytester.makepyfile(test_kinds="def test_kind(pgha_proxy_kind):\n    pass\n")
    from_ini = collected_ids(run(pytester, run_basedir, "--collect-only", "-q"))
    assert from_ini == ["test_kinds.py::test_kind[pgcat]", "test_kinds.py::test_kind[haproxy]"]
    from_cli = collected_ids(
        run(pytester, run_basedir, "--collect-only", "-q", "--pgha-proxies=pgpool")
    )
    assert from_cli == ["test_kinds.py::test_kind[pgpool]"]


def test_conftest_override_pins_one_kind(pytester: pytest.Pytester, run_basedir: Path) -> None:
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def pgha_proxy_kind():
            return "haproxy"
        """
    )
    pytester.makepyfile(
        test_pinned="""
        def test_pinned(pgha_proxy_kind):
            assert pgha_proxy_kind == "haproxy"
        """
    )
    ids = collected_ids(
        run(pytester, run_basedir, "--collect-only", "-q", "--pgha-proxies=direct,pgbouncer")
    )
    assert ids == ["test_pinned.py::test_pinned"]
    # And the pinned value is the one the test gets.
    result = run(pytester, run_basedir, "--pgha-proxies=direct,pgbouncer")
    assert result.ret == pytest.ExitCode.OK, output(result)
    result.assert_outcomes(passed=1)


def test_own_parametrization_is_not_doubled(pytester: pytest.Pytester, run_basedir: Path) -> None:
    pytester.makepyfile(
        test_own="""
        import pytest

        @pytest.mark.parametrize("pgha_proxy_kind", ["haproxy", "direct"], indirect=True)
        def test_indirect(pgha_proxy_kind):
            assert pgha_proxy_kind in ("haproxy", "direct")

        @pytest.mark.parametrize("pgha_proxy_kind", ["pgcat"])
        def test_direct_values(pgha_proxy_kind):
            assert pgha_proxy_kind == "pgcat"

        @pytest.mark.parametrize("n, pgha_proxy_kind", [(1, "pgpool")])
        def test_with_other_args(n, pgha_proxy_kind):
            assert pgha_proxy_kind == "pgpool"

        @pytest.mark.parametrize(("n", "pgha_proxy_kind"), [(2, "pgdog")])
        def test_tuple_of_names(n, pgha_proxy_kind):
            assert pgha_proxy_kind == "pgdog"

        @pytest.mark.parametrize("pgha_proxy_kind", ["haproxy"], indirect=True)
        class TestClassLevel:
            def test_method(self, pgha_proxy_kind):
                assert pgha_proxy_kind == "haproxy"
        """
    )
    args = ("--pgha-proxies=direct,pgbouncer",)
    ids = collected_ids(run(pytester, run_basedir, "--collect-only", "-q", *args))
    assert ids == [
        "test_own.py::test_indirect[haproxy]",
        "test_own.py::test_indirect[direct]",
        "test_own.py::test_direct_values[pgcat]",
        "test_own.py::test_with_other_args[1-pgpool]",
        "test_own.py::test_tuple_of_names[2-pgdog]",
        "test_own.py::TestClassLevel::test_method[haproxy]",
    ]
    result = run(pytester, run_basedir, *args)
    assert result.ret == pytest.ExitCode.OK, output(result)
    result.assert_outcomes(passed=6)


def test_keyword_argnames_parametrization_is_not_doubled(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(
        test_keyword="""
        import pytest

        @pytest.mark.parametrize(argnames="pgha_proxy_kind", argvalues=["haproxy"])
        def test_keyword(pgha_proxy_kind):
            pass
        """
    )
    result = run(pytester, run_basedir, "--collect-only", "-q", "--pgha-proxies=direct")
    assert "duplicate parametrization" not in output(result)
    assert collected_ids(result) == ["test_keyword.py::test_keyword[haproxy]"]


def test_parameter_with_a_longer_name_does_not_disable_kinds(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    pytester.makepyfile(
        test_longer="""
        import pytest

        @pytest.mark.parametrize("pgha_proxy_kind_label", ["x"])
        def test_labelled(pgha_proxy_kind, pgha_proxy_kind_label):
            pass
        """
    )
    ids = collected_ids(
        run(pytester, run_basedir, "--collect-only", "-q", "--pgha-proxies=direct,haproxy")
    )
    # One test per kind; the order of the id's parts is pytest's business.
    params = sorted(frozenset(i.split("[", 1)[1].rstrip("]").split("-")) for i in ids)
    assert params == sorted([frozenset({"x", "direct"}), frozenset({"x", "haproxy"})])


def test_missing_proxy_binary_skips_with_install_route(
    pytester: pytest.Pytester, run_basedir: Path
) -> None:
    if shutil.which("proxysql", path=f"{os.environ.get('PATH', '')}:{SBIN_DIRS}"):
        pytest.skip("proxysql is installed on this machine: nothing to skip")
    pytester.makepyfile(
        test_missing="""
        def test_needs_proxy(pgha_proxy):
            raise AssertionError("must not run without the proxy")
        """
    )
    result = run(pytester, run_basedir, "--pgha-proxies=proxysql", "-rs")
    assert result.ret == pytest.ExitCode.OK, output(result)
    result.assert_outcomes(skipped=1)
    skip_lines = [line for line in result.outlines if line.startswith("SKIPPED")]
    assert len(skip_lines) == 1, output(result)
    reason = skip_lines[0]
    assert "test_missing.py" in reason
    assert "proxysql is not installed" in reason
    # The install route: where to get it and how to install it.
    assert "https://github.com/sysown/proxysql/releases" in reason
    assert re.search(r"dpkg -i proxysql_3\.\S*\.deb", reason), reason
