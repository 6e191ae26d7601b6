"""pytest-pgha's pytest plugin: options, markers, run set-up, the run summary, and
the fixtures' entry point.

Kept thin: the behaviour lives in the packages named after their concern.
"""

from __future__ import annotations

import os
import platform
import shutil
import uuid
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_pgha import __version__, doctor
from pytest_pgha.errors import PghaConfigError
from pytest_pgha.ha.registry import HA_MANAGERS
from pytest_pgha.lag import prioritise_session, restore_session
from pytest_pgha.metrics import CATALOG
from pytest_pgha.plugin import hookspecs
from pytest_pgha.plugin import options as pgha_config
from pytest_pgha.plugin import session as run_summary
from pytest_pgha.plugin.cluster_fixtures import (  # noqa: F401  (fixtures are found by name)
    RUN_ID_KEY,
    pgha_binaries,
    pgha_cluster,
    pgha_sandbox,
)
from pytest_pgha.plugin.fault_fixtures import (  # noqa: F401
    pgha_client_link,
    pgha_replication_links,
    pgha_toxiproxy,
)
from pytest_pgha.plugin.proxy_fixtures import pgha_proxy, pgha_proxy_kind  # noqa: F401
from pytest_pgha.plugin.recording import violations
from pytest_pgha.plugin.scenario_fixtures import (  # noqa: F401
    pgha_failover,
    pgha_scenario,
    pgha_stack,
)
from pytest_pgha.plugin.slo_fixtures import pgha_slo, validate_marker, validate_options  # noqa: F401
from pytest_pgha.proxies.registry import PROXIES
from pytest_pgha.report.allure_report import write_run_files
from pytest_pgha.report.summary import (
    format_terminal_summary,
    from_workeroutput,
    merge_entries,
    to_workeroutput,
    write_summary,
)
from pytest_pgha.sandbox.context import check_reachable, reap_orphans
from pytest_pgha.sandbox.registry import Registry
from pytest_pgha.sandbox.runas import service_identity
from pytest_pgha.slo.judge import SloViolation

MARKERS = (
    "slo(**bounds): SLO bounds on the test's metrics, e.g. slo(writes_resume_ms='<= 1500')",
    "pgha_cluster(**options): options of the test's cluster (replicas, synchronous, "
    "synchronous_commit, settings, pg_bindir, scale)",
    "pgha_proxy(monitor=False, options={}): how the test's proxy is configured",
    "live: the test starts real servers (added by pytest-pgha to every test that uses a "
    "cluster fixture; run the others alone with -m 'not live')",
)
WORKEROUTPUT_KEY = "pgha_summary"
SESSION_NICENESS_KEY = pytest.StashKey["int | None"]()
REGISTRIES_KEY = pytest.StashKey[tuple[Any, Any, Any]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    pgha_config.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def _add_plugins_kinds(config: pytest.Config) -> None:
    """Let conftests and plugins register their metrics, HA managers and proxies; what
    they register is forgotten at the end of the run (pytest_unconfigure)."""
    config.stash[REGISTRIES_KEY] = (
        CATALOG.snapshot(),
        HA_MANAGERS.snapshot(),
        PROXIES.snapshot(),
    )
    config.hook.pytest_pgha_add_metrics(catalog=CATALOG)
    config.hook.pytest_pgha_add_ha_managers(registry=HA_MANAGERS)
    config.hook.pytest_pgha_add_proxies(registry=PROXIES)


def _forget_plugins_kinds(config: pytest.Config) -> None:
    saved = config.stash.get(REGISTRIES_KEY, None)
    if saved is not None:
        CATALOG.restore(saved[0])
        HA_MANAGERS.restore(saved[1])
        PROXIES.restore(saved[2])


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    try:
        _add_plugins_kinds(config)
        opts = pgha_config.resolve(config)
        config.stash[pgha_config.STASH_KEY] = opts
        validate_options(config)
        check_reachable(opts.base_dir.resolve(), service_identity())
    except PghaConfigError as error:
        raise pytest.UsageError(str(error)) from None
    if _is_xdist_worker(config):
        workerinput: dict[str, Any] = config.workerinput  # type: ignore[attr-defined]
        config.stash[RUN_ID_KEY] = workerinput["pgha_run_id"]
        return
    # The harness's session is favoured over the servers' (pytest_pgha.lag): its
    # instruments and the workload's clock must wake on time on a busy runner.
    config.stash[SESSION_NICENESS_KEY] = prioritise_session()
    # The controller (or a plain run) owns the run: it reaps what killed runs left,
    # and registers its run directory so that a SIGKILLed run's is reaped next time.
    run_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    config.stash[RUN_ID_KEY] = run_id
    if opts.base_dir.exists():
        reap_orphans(opts.base_dir)
    run_dir = opts.base_dir / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    opts.base_dir.chmod(0o755)
    run_dir.chmod(0o755)
    Registry(opts.base_dir / "registry").add_directory(run_dir)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: every worker joins the controller's run."""
    node.workerinput["pgha_run_id"] = node.config.stash[RUN_ID_KEY]


def _parametrized_names(metafunc: pytest.Metafunc) -> set[str]:
    """Argument names the test parametrizes itself (positional or keyword argnames)."""
    names: set[str] = set()
    for marker in metafunc.definition.iter_markers("parametrize"):
        argnames = marker.args[0] if marker.args else marker.kwargs.get("argnames", ())
        if isinstance(argnames, str):
            argnames = argnames.split(",")
        names.update(str(name).strip() for name in argnames)
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that uses pgha_proxy_kind once per selected proxy kind, unless
    the test parametrizes it itself or a conftest overrides the fixture."""
    if "pgha_proxy_kind" not in metafunc.fixturenames:
        return
    if "pgha_proxy_kind" in _parametrized_names(metafunc):
        return
    definitions = metafunc._arg2fixturedefs.get("pgha_proxy_kind", ())
    if definitions and definitions[-1].func is not pgha_proxy_kind.__wrapped__:  # type: ignore[attr-defined]
        return
    kinds = pgha_config.options(metafunc.config).proxies
    metafunc.parametrize("pgha_proxy_kind", kinds, ids=list(kinds), indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _starts_servers(item):
            item.add_marker(pytest.mark.live)
    errors = [e for e in (validate_marker(item) for item in items) if e]
    if errors:
        raise pytest.UsageError("malformed slo marker:\n" + "\n".join(errors))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """SLOs violated by the test's scenarios fail it once its body has run: the rest of
    the test still runs, and a failure of its own is reported with the SLO table."""
    try:
        yield
    except BaseException:
        for violation in violations(item):
            item.add_report_section("call", "pytest-pgha SLOs", str(violation))
        raise
    found = violations(item)
    if found:
        raise found[0] if len(found) == 1 else SloViolation([r for v in found for r in v.results])


def _write_allure_run_files(config: pytest.Config) -> None:
    """With --alluredir: what the run ran on (environment.properties) and how the
    report groups failures (categories.json)."""
    results_dir = config.getoption("allure_report_dir", None)
    if not results_dir:
        return
    environment = {finding.name: finding.detail for finding in doctor.findings() if finding.found}
    environment |= {
        "cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "pytest-pgha": __version__,
        "proxy kinds": ", ".join(pgha_config.options(config).proxies),
        "HA managers": ", ".join(HA_MANAGERS.kinds()),
    }
    write_run_files(Path(results_dir), environment)


def _starts_servers(item: pytest.Item) -> bool:
    """Whether one of the item's fixtures is a cluster (pgha_cluster_factory marks its
    fixtures), directly or through pgha_proxy, pgha_stack or pgha_scenario."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        getattr(definition.func, "pgha_live", False)
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if pgha_config.STASH_KEY not in config.stash:
        return
    entries = run_summary.entries(config)
    if _is_xdist_worker(config):
        config.workeroutput[WORKEROUTPUT_KEY] = to_workeroutput(entries)  # type: ignore[attr-defined]
    else:
        # Always written, so the file never shows an earlier run's results.
        write_summary(merge_entries(entries), run_summary.summary_path(config))
        _write_allure_run_files(config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist: fold a worker's summary entries into the controller's."""
    payload = getattr(node, "workeroutput", {}).get(WORKEROUTPUT_KEY)
    if payload:
        run_summary.entries(node.config).extend(from_workeroutput(payload))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _is_xdist_worker(config) or pgha_config.STASH_KEY not in config.stash:
        return
    entries = run_summary.entries(config)
    if entries:
        terminalreporter.section("pytest-pgha SLO results")
        for line in format_terminal_summary(merge_entries(entries)):
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"summary: {run_summary.summary_path(config)}")
    if pgha_config.options(config).keep:
        _report_kept(terminalreporter, config)


def _report_kept(terminalreporter: Any, config: pytest.Config) -> None:
    """Where --pgha-keep kept each test's data directories, logs and configs."""
    run_dir = pgha_config.options(config).base_dir / "runs" / config.stash[RUN_ID_KEY]
    tests = sorted(p for p in run_dir.glob("*/*") if p.is_dir() and p.parent.name != "templates")
    terminalreporter.section("pytest-pgha kept")
    for path in tests:
        terminalreporter.write_line(str(path))
    terminalreporter.write_line(
        f"{len(tests)} test director(ies) under {run_dir}; later runs leave them alone, "
        "`pgha cleanup` removes them"
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    restore_session(config.stash.get(SESSION_NICENESS_KEY, None))
    _forget_plugins_kinds(config)
    if pgha_config.STASH_KEY not in config.stash or RUN_ID_KEY not in config.stash:
        return
    opts = pgha_config.options(config)
    registry = Registry(opts.base_dir / "registry")
    # Whatever a fixture could not stop (it never got to its finalizer) dies here.
    registry.reap_owned_by_me(keep_directories=opts.keep)
    if not _is_xdist_worker(config) and not opts.keep:
        shutil.rmtree(opts.base_dir / "runs" / config.stash[RUN_ID_KEY], ignore_errors=True)
