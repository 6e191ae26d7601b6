"""The run's options, resolved once: command line > ini > environment > default.

A falsy command-line value still wins over the ini file (`is not None`, never `or`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_pgha.errors import PghaConfigError
from pytest_pgha.proxies.registry import BUILT_IN_KINDS, PROXIES
from pytest_pgha.sandbox.context import default_base_dir

STASH_KEY = pytest.StashKey["PghaOptions"]()


@dataclass(frozen=True)
class PghaOptions:
    pg_bindir_option: str | None
    pg_bindir_ini: str | None
    pg_bindir_env: str | None
    base_dir: Path
    keep: bool
    slo_cli: tuple[str, ...]
    slo_ini: tuple[str, ...]
    bucket_ms: int
    proxies: tuple[str, ...]
    # Where <kind>.toml proxy overrides are read from (None: there are none).
    proxy_configs: Path | None = None


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("pgha", "PostgreSQL HA measurements (pytest-pgha)")
    group.addoption(
        "--pgha-pg-bindir",
        default=None,
        metavar="DIR",
        help="PostgreSQL bin/ directory (default: discovered, see README)",
    )
    group.addoption(
        "--pgha-basedir",
        default=None,
        metavar="DIR",
        help="where sandboxes live (default /dev/shm/pgha, else /tmp/pgha)",
    )
    group.addoption(
        "--pgha-keep",
        action="store_true",
        default=None,
        help="keep the sandbox directories (data, logs, configs) after the run",
    )
    group.addoption(
        "--pgha-slo",
        action="append",
        default=None,
        metavar="NAME<=VALUE",
        help="an SLO bound, repeatable; overrides markers and the ini file",
    )
    group.addoption(
        "--pgha-bucket-ms",
        default=None,
        metavar="MS",
        help="width of the throughput buckets, 10..1000 ms (default 100)",
    )
    group.addoption(
        "--pgha-proxies",
        default=None,
        metavar="KIND,...",
        help=f"proxy kinds to run ({', '.join(BUILT_IN_KINDS)} or a plugin's; default all)",
    )
    parser.addini("pgha_pg_bindir", "PostgreSQL bin/ directory", default=None)
    parser.addini("pgha_basedir", "where sandboxes live", default=None)
    parser.addini("pgha_slo", "SLO bounds, one NAME<=VALUE per line", type="linelist", default=[])
    parser.addini("pgha_bucket_ms", "width of the throughput buckets in ms", default=None)
    parser.addini("pgha_proxies", "proxy kinds to run, comma-separated", default=None)
    group.addoption(
        "--pgha-proxy-configs",
        default=None,
        metavar="DIR",
        help="directory of <kind>.toml proxy option overrides (default: fixtures/proxies "
        "under the rootdir, when it exists)",
    )
    parser.addini(
        "pgha_proxy_configs", "directory of <kind>.toml proxy option overrides", default=None
    )


def _pick(cli: object, cli_name: str, ini: object, ini_name: str) -> tuple[str | None, str]:
    """The command-line value if given (even an empty one), else the ini value; and
    the name of where it came from, for error messages."""
    if cli is not None:
        return str(cli), cli_name
    if ini not in (None, ""):
        return str(ini), ini_name
    return None, cli_name


def resolve(config: pytest.Config) -> PghaOptions:
    option = config.option
    base_dir, _ = _pick(
        option.pgha_basedir, "--pgha-basedir", config.getini("pgha_basedir"), "ini pgha_basedir"
    )
    bucket_text, bucket_source = _pick(
        option.pgha_bucket_ms,
        "--pgha-bucket-ms",
        config.getini("pgha_bucket_ms"),
        "ini pgha_bucket_ms",
    )
    try:
        bucket_ms = int(bucket_text or "100")
    except ValueError:
        bucket_ms = -1
    if not 10 <= bucket_ms <= 1000:
        raise PghaConfigError.invalid(
            bucket_source, bucket_text, "give a whole number of milliseconds from 10 to 1000"
        )
    proxies_text, proxies_source = _pick(
        option.pgha_proxies, "--pgha-proxies", config.getini("pgha_proxies"), "ini pgha_proxies"
    )
    proxies = _proxy_kinds(proxies_text, proxies_source)
    configs_text, configs_source = _pick(
        option.pgha_proxy_configs,
        "--pgha-proxy-configs",
        config.getini("pgha_proxy_configs"),
        "ini pgha_proxy_configs",
    )
    return PghaOptions(
        pg_bindir_option=option.pgha_pg_bindir,
        pg_bindir_ini=config.getini("pgha_pg_bindir") or None,
        pg_bindir_env=os.environ.get("PGHA_PG_BINDIR") or None,
        base_dir=Path(base_dir) if base_dir else default_base_dir(),
        keep=bool(option.pgha_keep),
        slo_cli=tuple(option.pgha_slo or ()),
        slo_ini=tuple(config.getini("pgha_slo")),
        bucket_ms=bucket_ms,
        proxies=proxies,
        proxy_configs=_proxy_configs(config, configs_text, configs_source),
    )


def _proxy_configs(config: pytest.Config, text: str | None, source: str) -> Path | None:
    if text is None:
        default = Path(config.rootpath) / "fixtures" / "proxies"
        return default if default.is_dir() else None
    path = Path(text)
    if not path.is_absolute():
        path = Path(config.rootpath) / path
    if not path.is_dir():
        raise PghaConfigError.invalid(
            source, text, "give a directory holding <kind>.toml files (pgbouncer.toml, ...)"
        )
    return path


def _proxy_kinds(text: str | None, source: str) -> tuple[str, ...]:
    """The kinds asked for (any case), in their registered spelling; all by default."""
    if text is None:
        return PROXIES.kinds()
    asked = [p.strip() for p in text.split(",") if p.strip()]
    if not asked:
        raise PghaConfigError.invalid(source, text, f"choose among {', '.join(PROXIES.kinds())}")
    try:
        return tuple(dict.fromkeys(PROXIES.canonical(p) for p in asked))
    except PghaConfigError as error:
        raise PghaConfigError(f"{source}: {error}") from None


def options(config: pytest.Config) -> PghaOptions:
    return config.stash[STASH_KEY]
