"""pytest-pgha's pytest plugin: options, markers, run set-up and the fixtures' entry.

Kept thin: the behaviour lives in the packages named after their concern.
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

import pytest

from pytest_pgha import config as pgha_config
from pytest_pgha.cluster.fixtures import (  # noqa: F401  (fixtures are found by name)
    RUN_ID_KEY,
    pgha_binaries,
    pgha_cluster,
    pgha_sandbox,
)
from pytest_pgha.errors import PghaConfigError
from pytest_pgha.sandbox.context import reap_orphans
from pytest_pgha.sandbox.registry import Registry

MARKERS = (
    "slo(**bounds): SLO bounds on failover metrics, e.g. slo(writes_resume_ms='<= 1500')",
    "pgha_cluster(**options): cluster options for the tests' default cluster",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    pgha_config.add_options(parser)


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    try:
        opts = pgha_config.resolve(config)
    except PghaConfigError as error:
        raise pytest.UsageError(str(error)) from None
    config.stash[pgha_config.STASH_KEY] = opts
    if _is_xdist_worker(config):
        workerinput: dict[str, Any] = config.workerinput  # type: ignore[attr-defined]
        config.stash[RUN_ID_KEY] = workerinput["pgha_run_id"]
        return
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


def pytest_unconfigure(config: pytest.Config) -> None:
    if pgha_config.STASH_KEY not in config.stash or RUN_ID_KEY not in config.stash:
        return
    opts = pgha_config.options(config)
    registry = Registry(opts.base_dir / "registry")
    # Whatever a fixture could not stop (it never got to its finalizer) dies here.
    registry.reap_owned_by_me(keep_directories=opts.keep)
    if not _is_xdist_worker(config) and not opts.keep:
        shutil.rmtree(opts.base_dir / "runs" / config.stash[RUN_ID_KEY], ignore_errors=True)
