"""Cluster fixtures: a factory in the style of pytest-postgresql, and a default."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Literal, TypeVar

import pytest

from pytest_pgha.cluster.binaries import PgBinaries, discover, reachable_by_service_user
from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.spec import ClusterSpec
from pytest_pgha.cluster.template import ensure_template
from pytest_pgha.errors import PghaConfigError, PghaError
from pytest_pgha.plugin import options as pgha_config
from pytest_pgha.sandbox.context import SandboxContext, open_sandbox


@pytest.fixture(scope="session")
def pgha_sandbox(request: pytest.FixtureRequest) -> SandboxContext:
    """Where this run's processes and directories live."""
    opts = pgha_config.options(request.config)
    return open_sandbox(opts.base_dir, request.config.stash[RUN_ID_KEY])


RUN_ID_KEY = pytest.StashKey[str]()
T = TypeVar("T")


def resolve_binaries(
    request: pytest.FixtureRequest, sandbox: SandboxContext, factory_bindir: str | None
) -> PgBinaries:
    opts = pgha_config.options(request.config)
    found = discover(
        factory=factory_bindir,
        option=opts.pg_bindir_option,
        ini=opts.pg_bindir_ini,
        env=opts.pg_bindir_env,
    )
    return reachable_by_service_user(found, sandbox.cache_dir)


@pytest.fixture(scope="session")
def pgha_binaries(request: pytest.FixtureRequest, pgha_sandbox: SandboxContext) -> PgBinaries:
    """The PostgreSQL binaries of this run (see README for the discovery order)."""
    return _or_fail(lambda: resolve_binaries(request, pgha_sandbox, None))


def start_cluster(
    request: pytest.FixtureRequest, spec: ClusterSpec, binaries: PgBinaries
) -> Generator[Cluster, None, None]:
    sandbox: SandboxContext = request.getfixturevalue("pgha_sandbox")
    template = ensure_template(sandbox, binaries, spec.scale)
    workdir = sandbox.test_dir(request.node.name)
    cluster = Cluster(spec, template, sandbox, workdir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        if not pgha_config.options(request.config).keep:
            cluster.remove()


def _or_fail(action: Callable[[], T]) -> T:
    """action(), or a test failure showing just the message of a PghaError: it names
    the option and the fix, and a traceback from inside the plugin would only hide it."""
    try:
        return action()
    except PghaError as error:
        message = str(error)
    # Outside the except block: no "During handling of the above exception" echo.
    pytest.fail(message, pytrace=False)


FACTORY_DEFAULTS: dict[str, Any] = {
    "replicas": 2,
    "synchronous": "off",
    "synchronous_commit": "on",
    "settings": None,
    "pg_bindir": None,
    "scale": 1,
}
FACTORY_OPTIONS = tuple(FACTORY_DEFAULTS)
Scope = Literal["session", "package", "module", "class", "function"]
SCOPES: tuple[Scope, ...] = ("session", "package", "module", "class", "function")


def marker_options(request: pytest.FixtureRequest, defaults: dict[str, Any]) -> dict[str, Any]:
    """The factory's options, overridden by the closest pgha_cluster(...) marker."""
    marker = request.node.get_closest_marker("pgha_cluster")
    if marker is None:
        return defaults
    if marker.args:
        raise PghaConfigError.invalid(
            "pgha_cluster marker",
            list(marker.args),
            f"give keyword options only, among {', '.join(FACTORY_OPTIONS)}",
        )
    unknown = sorted(set(marker.kwargs) - set(FACTORY_OPTIONS))
    if unknown:
        raise PghaConfigError.unknown("pgha_cluster marker", unknown, FACTORY_OPTIONS)
    return {**defaults, **marker.kwargs}


def _open_cluster(
    request: pytest.FixtureRequest, options: dict[str, Any]
) -> Generator[Cluster, None, None]:
    spec = ClusterSpec(
        replicas=options["replicas"],
        synchronous=options["synchronous"],
        synchronous_commit=options["synchronous_commit"],
        settings=dict(options["settings"] or {}),
        scale=options["scale"],
    )
    sandbox: SandboxContext = request.getfixturevalue("pgha_sandbox")
    pg_bindir = options["pg_bindir"]
    binaries = (
        resolve_binaries(request, sandbox, str(pg_bindir))
        if pg_bindir
        else request.getfixturevalue("pgha_binaries")
    )
    return start_cluster(request, spec, binaries)


def pgha_cluster_factory(**options: Any) -> Callable[..., Generator[Cluster, None, None]]:
    """Make a cluster fixture. In conftest.py::

        sync_cluster = pgha_cluster_factory(replicas=2, synchronous="FIRST 1 (*)")

    replicas: streaming replicas beside the primary (0..8); synchronous: 'off',
    'FIRST n (names)' or 'ANY n (names)' ('*' = every replica); synchronous_commit:
    off/local/remote_write/on/remote_apply; settings: extra postgresql.conf settings
    (e.g. {"wal_retrieve_retry_interval": "200ms"}); pg_bindir: overrides discovery;
    scale: pgbench scale of database app. A ``@pytest.mark.pgha_cluster(...)`` marker
    with the same keywords, on the test (or its module or class, for broader scopes),
    overrides these. Invalid options fail the tests that use the fixture with one
    message naming the option and the fix.
    """
    unknown = sorted(set(options) - {*FACTORY_OPTIONS, "scope"})
    if unknown:
        raise PghaConfigError.unknown(
            "pgha_cluster_factory()", unknown, (*FACTORY_OPTIONS, "scope")
        )
    defaults = {**FACTORY_DEFAULTS, **{k: v for k, v in options.items() if k != "scope"}}
    scope: Scope = options.get("scope", "function")
    if scope not in SCOPES:
        raise PghaConfigError.invalid("pgha_cluster_factory(scope)", scope, f"use one of {SCOPES}")

    def cluster_fixture(request: pytest.FixtureRequest) -> Generator[Cluster, None, None]:
        cluster_gen = _or_fail(lambda: _open_cluster(request, marker_options(request, defaults)))
        yield _or_fail(lambda: next(cluster_gen))
        _or_fail(lambda: next(cluster_gen, None))

    # Read by the plugin, which marks every test that uses the fixture "live".
    cluster_fixture.pgha_live = True  # type: ignore[attr-defined]
    return pytest.fixture(scope=scope)(cluster_fixture)


pgha_cluster = pgha_cluster_factory()
