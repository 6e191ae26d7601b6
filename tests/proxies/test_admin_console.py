"""The admin console never waits for ever on a command (a proxy can accept a session
and then leave it unanswered), and logs in again after giving up on one."""

from __future__ import annotations

import time

import pytest

from pytest_pgha import pgha_cluster_factory
from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.errors import ProxyError
from pytest_pgha.proxies.admin import AdminConsole

lone_primary = pgha_cluster_factory(replicas=0)


def test_an_unanswered_command_times_out_and_the_console_recovers(lone_primary: Cluster) -> None:
    console = AdminConsole(lone_primary.primary.dsn(), timeout_s=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(ProxyError, match=r"no answer within 0\.3s"):
            console.query("SELECT pg_sleep(10)")
        assert time.monotonic() - started < 2
        assert console.query("SELECT 1 AS one") == [{"one": "1"}]
    finally:
        console.close()
