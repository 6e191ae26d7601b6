"""Fixtures of the sandbox tests."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from pytest_pgha.sandbox.runas import service_identity


@pytest.fixture
def fresh_identity() -> Generator[None, None, None]:
    """service_identity() is cached per process: tests that fake the uid need it anew."""
    service_identity.cache_clear()
    yield
    service_identity.cache_clear()
