"""Proxy fixtures: `pgha_proxy_kind` (parametrized over --pgha-proxies by the plugin)
and `pgha_proxy`, the real proxy in front of the test's cluster."""

from __future__ import annotations

import sys
from collections.abc import Generator, Mapping
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.errors import PghaConfigError, PghaError
from pytest_pgha.plugin import options as pgha_config
from pytest_pgha.proxies.base import Proxy
from pytest_pgha.proxies.cluster_settings import proxy_settings
from pytest_pgha.proxies.registry import PROXIES, adapter
from pytest_pgha.sandbox.context import SandboxContext

DEFAULT_KIND = "pgbouncer"


PROXY_MARKER = ("monitor", "options")


def options_for_kind(given: object, kind: str) -> dict[str, str]:
    """The marker's options for this kind: options={"pgbouncer": {...}, ...} per kind
    (a kind left out gets none), or a flat {...} for every kind."""
    if not isinstance(given, Mapping):
        raise PghaConfigError.invalid("pgha_proxy(options)", given, "give a dict")
    per_kind = [k for k in given if isinstance(k, str) and k in PROXIES]
    if per_kind and len(per_kind) == len(given):
        chosen = given.get(kind) or given.get(PROXIES.canonical(kind)) or {}
        if not isinstance(chosen, Mapping):
            raise PghaConfigError.invalid(f"pgha_proxy(options[{kind!r}])", chosen, "give a dict")
        return {str(k): str(v) for k, v in chosen.items()}
    if per_kind:
        raise PghaConfigError(
            f"pgha_proxy(options=...): mixes proxy kinds {per_kind} with option names; give "
            'either {"pgbouncer": {...}, "haproxy": {...}} or one flat dict for every kind'
        )
    return {str(k): str(v) for k, v in given.items()}


def check_option_names(cls: type[Proxy], options: Mapping[str, str]) -> None:
    """An adapter that reads a fixed set of options refuses others by name; the rest
    write every option into the proxy's own config file, whose parser refuses a
    misspelt one when the proxy starts."""
    if cls.option_names is None:
        return
    unknown = sorted(set(options) - cls.option_names)
    if unknown:
        raise PghaConfigError.unknown(f"{cls.kind} options", unknown, sorted(cls.option_names))


@pytest.fixture
def pgha_proxy_kind(request: pytest.FixtureRequest) -> str:
    """The proxy kind of this test; the plugin parametrizes it over --pgha-proxies.
    Override it in conftest.py to pin one kind."""
    return str(getattr(request, "param", DEFAULT_KIND))


def project_overrides(config: pytest.Config, kind: str) -> dict[str, str]:
    """The [options] of <kind>.toml in the run's proxy config directory, if any
    (--pgha-proxy-configs; fixtures/proxies under the rootdir by default)."""
    directory = pgha_config.options(config).proxy_configs
    path = directory / f"{kind}.toml" if directory else None
    if path is None or not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise PghaConfigError(f"{path}: not valid TOML ({error}); fix the file") from None
    options = data.get("options", {})
    if not isinstance(options, dict):
        raise PghaConfigError(f'{path}: [options] must be a table of name = "value"')
    return {str(k): str(v) for k, v in options.items()}


def start_proxy(
    request: pytest.FixtureRequest, cluster: Cluster, sandbox: SandboxContext, kind: str
) -> Generator[Proxy, None, None]:
    marker = request.node.get_closest_marker("pgha_proxy")
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    try:
        from_file = project_overrides(request.config, kind)
    except PghaError as error:
        pytest.fail(str(error), pytrace=False)
    try:
        cls = adapter(kind)
    except PghaError as error:
        pytest.fail(str(error), pytrace=False)
    binary = cls.locate()
    if binary is None:
        pytest.skip(f"{kind} is not installed ({cls.program} not found): {cls.install_hint}")
    monitor = bool(options.pop("monitor", False))
    if monitor and not cls.has_monitor:
        pytest.skip(f"{kind} has no primary detection of its own: monitor=True does not apply")
    try:
        given = options_for_kind(options.pop("options", {}), kind)
        extra = {**from_file, **given}
        check_option_names(cls, extra)
    except PghaConfigError as error:
        pytest.fail(str(error), pytrace=False)
    if options:
        unknown = PghaConfigError.unknown("pgha_proxy marker", sorted(options), PROXY_MARKER)
        pytest.fail(str(unknown), pytrace=False)
    settings, ports = proxy_settings(cluster, sandbox, kind, monitor=monitor, options=extra)
    proxy = cls(settings, sandbox, binary)
    try:
        proxy.start()
        yield proxy
    except PghaError as error:
        pytest.fail(f"{kind} did not start: {error}", pytrace=False)
    finally:
        proxy.stop()
        proxy.release_leftovers()
        for port in ports:
            sandbox.ports.release(port)


@pytest.fixture
def pgha_proxy(
    request: pytest.FixtureRequest,
    pgha_cluster: Cluster,
    pgha_sandbox: SandboxContext,
    pgha_proxy_kind: str,
) -> Generator[Proxy, None, None]:
    """A real proxy of kind `pgha_proxy_kind` in front of `pgha_cluster`. Configure it
    with @pytest.mark.pgha_proxy(monitor=True, options={"server_login_retry": "1"})."""
    yield from start_proxy(request, pgha_cluster, pgha_sandbox, pgha_proxy_kind)
