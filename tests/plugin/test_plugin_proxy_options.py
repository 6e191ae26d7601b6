"""Proxy options per kind, typos refused by name, and a directory of the user's own
<kind>.toml defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from plugin_helpers import output, run

TESTS = """
import pytest

@pytest.mark.pgha_cluster(replicas=1)
@pytest.mark.pgha_proxy(options={"pgbouncer": {"default_pool_size": "7"}, "haproxy": {}})
def test_per_kind(pgha_proxy):
    assert dict(pgha_proxy.settings.options).get("default_pool_size") == (
        "7" if pgha_proxy.kind == "pgbouncer" else None
    )

@pytest.mark.pgha_cluster(replicas=1)
@pytest.mark.pgha_proxy(options={"haproxy": {"retrys": "2"}, "pgbouncer": {"pool_mod": "session"}})
def test_typo(pgha_proxy):
    pass
"""


def test_options_per_kind_and_typos(pytester: pytest.Pytester, run_basedir: Path) -> None:
    pytester.makepyfile(test_options=TESTS)
    result = run(pytester, run_basedir, "--pgha-proxies=pgbouncer,haproxy", "-rE")
    text = output(result)
    result.assert_outcomes(passed=2, errors=2)
    assert "haproxy options: unknown option 'retrys' (did you mean 'retries'?)" in text, text
    assert "unknown parameter: pgbouncer/pool_mod" in text, text


def test_a_directory_of_proxy_defaults(pytester: pytest.Pytester, run_basedir: Path) -> None:
    configs = pytester.path / "my-proxies"
    configs.mkdir()
    (configs / "pgbouncer.toml").write_text('[options]\ndefault_pool_size = "9"\n')
    pytester.makepyfile(
        test_defaults="""
        import pytest

        @pytest.mark.pgha_cluster(replicas=0)
        def test_defaults(pgha_proxy):
            assert pgha_proxy.settings.options["default_pool_size"] == "9"
        """
    )
    result = run(
        pytester, run_basedir, "--pgha-proxies=pgbouncer", "--pgha-proxy-configs=my-proxies"
    )
    assert result.ret == pytest.ExitCode.OK, output(result)
    missing = run(pytester, run_basedir, "--pgha-proxy-configs=nowhere")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    assert "give a directory holding <kind>.toml files" in output(missing)
