"""Pgpool-II adapter: the rendered configuration (unit) and both failover paths against
a real Pgpool in front of a real cluster (live)."""

from __future__ import annotations

import hashlib
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pytest_pgha.cluster.cluster import Cluster
from pytest_pgha.cluster.node import Node
from pytest_pgha.errors import ProxyError
from pytest_pgha.proxies.base import Backend, ProxySettings
from pytest_pgha.proxies.cluster_settings import proxy_settings
from pytest_pgha.proxies.pgpool import (
    ADMIN_USER,
    SUN_PATH_MAX,
    PgpoolProxy,
    PoolNode,
    parse_node_info,
)
from pytest_pgha.proxies.samples import WRITER_UP
from pytest_pgha.sandbox.context import SandboxContext

BINARY = PgpoolProxy.locate()
live = pytest.mark.skipif(BINARY is None, reason=PgpoolProxy.install_hint)

SHORT_WORKDIR = Path("/dev/shm/pgha/runs/1-abc/main/pgpool")
# As deep as sandbox test directories get: the socket no longer fits in sun_path.
LONG_WORKDIR = Path("/dev/shm/pgha/runs/1234567-0123abcd/gw12/") / ("x" * 60) / "pgpool"


# -- unit: render() ----------------------------------------------------------------------
def make_settings(workdir: Path = SHORT_WORKDIR, **changes: Any) -> ProxySettings:
    backends = (
        Backend("node0", "127.0.0.1", 25432, "primary"),
        Backend("node1", "127.0.0.1", 25433, "replica"),
        Backend("node2", "127.0.0.1", 25434, "replica"),
    )
    values: dict[str, Any] = {
        "workdir": workdir,
        "listen_port": 26432,
        "admin_port": 29898,
        "backends": backends,
        "app_password": "app-secret",
        "monitor_password": "monitor-secret",
        "admin_password": "pcp-secret",
        **changes,
    }
    return ProxySettings(**values)


def rendered(**changes: Any) -> dict[str, str]:
    return PgpoolProxy(make_settings(**changes), None, "/usr/sbin/pgpool").render()  # type: ignore[arg-type]


def parse_conf(text: str) -> dict[str, str]:
    """pgpool.conf as name -> value, quotes stripped; a name may appear only once."""
    conf: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep, f"not a name = value line: {line!r}"
        name, value = name.strip(), value.strip()
        assert name not in conf, f"{name} set twice"
        conf[name] = value[1:-1] if value.startswith("'") and value.endswith("'") else value
    return conf


def conf_of(**changes: Any) -> dict[str, str]:
    return parse_conf(rendered(**changes)["pgpool.conf"])


def test_render_writes_every_file_pgpool_and_pcp_read() -> None:
    assert set(rendered()) == {
        "pgpool.conf",
        "pool_hba.conf",
        "pool_passwd",
        "pcp.conf",
        "pcppass",
        "failover.sh",
    }


def test_streaming_replication_on_loopback_ports() -> None:
    conf = conf_of()
    assert conf["backend_clustering_mode"] == "streaming_replication"
    assert conf["listen_addresses"] == "127.0.0.1"
    assert conf["port"] == "26432"
    assert conf["pcp_listen_addresses"] == "127.0.0.1"
    assert conf["pcp_port"] == "29898"
    assert conf["use_watchdog"] == "off"
    assert conf["load_balance_mode"] == "on"
    assert int(conf["num_init_children"]) == 32
    assert int(conf["max_pool"]) <= 4


def test_one_backend_per_node_in_settings_order() -> None:
    conf = conf_of()
    for index, (name, port) in enumerate([("node0", 25432), ("node1", 25433), ("node2", 25434)]):
        assert conf[f"backend_hostname{index}"] == "127.0.0.1"
        assert conf[f"backend_port{index}"] == str(port)
        assert conf[f"backend_weight{index}"] == "1"
        assert conf[f"backend_flag{index}"] == "ALLOW_TO_FAILOVER"
        assert conf[f"backend_application_name{index}"] == name
    assert "backend_hostname3" not in conf
    assert not any(name.startswith("backend_data_directory") for name in conf)


def test_state_files_and_failover_script_live_in_the_workdir() -> None:
    conf = conf_of()
    assert conf["pid_file_name"] == f"{SHORT_WORKDIR}/pgpool.pid"
    assert conf["logdir"] == str(SHORT_WORKDIR)
    assert conf["failover_command"] == f"{SHORT_WORKDIR}/failover.sh %d %h %p %m %P"
    # Relative to pgpool.conf's directory, the workdir.
    assert conf["pool_passwd"] == "pool_passwd"


@pytest.mark.parametrize("workdir", [SHORT_WORKDIR, LONG_WORKDIR])
def test_unix_socket_paths_fit_in_sun_path(workdir: Path) -> None:
    conf = conf_of(workdir=workdir)
    for directory, port in (
        (conf["socket_dir"], conf["port"]),
        (conf["pcp_socket_dir"], conf["pcp_port"]),
    ):
        assert len(f"{directory}/.s.PGSQL.{port}") <= SUN_PATH_MAX
        # Either the workdir itself or relative to it (Pgpool's cwd).
        assert directory in (str(workdir), ".")


def test_a_short_workdir_holds_the_sockets_by_absolute_path() -> None:
    conf = conf_of()
    assert conf["socket_dir"] == conf["pcp_socket_dir"] == str(SHORT_WORKDIR)


def test_a_long_workdir_falls_back_to_a_relative_socket_dir() -> None:
    assert len(f"{LONG_WORKDIR}/.s.PGSQL.26432") > SUN_PATH_MAX
    conf = conf_of(workdir=LONG_WORKDIR)
    assert conf["socket_dir"] == conf["pcp_socket_dir"] == "."


def test_explicit_path_has_no_health_check_but_detaches_on_backend_errors() -> None:
    # Off, a reconnect storm starves the main process of pcp_detach_node (pgpool.py).
    conf = conf_of(monitor=False)
    assert conf["health_check_period"] == "0"
    assert conf["failover_on_backend_error"] == "on"
    assert conf["failover_on_backend_shutdown"] == "on"


def test_monitor_path_health_checks_every_second() -> None:
    conf = conf_of(monitor=True)
    assert conf["health_check_period"] == "1"
    assert conf["health_check_timeout"] == "1"
    assert conf["health_check_max_retries"] == "0"
    assert conf["health_check_user"] == "monitor"
    assert conf["health_check_password"] == "TEXTmonitor-secret"
    assert conf["failover_on_backend_error"] == "on"
    assert conf["failover_on_backend_shutdown"] == "on"


@pytest.mark.parametrize("monitor", [False, True])
def test_both_paths_find_the_primary_and_keep_the_standbys(monitor: bool) -> None:
    conf = conf_of(monitor=monitor)
    assert conf["sr_check_period"] == "1"
    assert conf["sr_check_user"] == "monitor"
    assert conf["sr_check_password"] == "TEXTmonitor-secret"
    assert conf["sr_check_database"] == "app"
    assert int(conf["search_primary_node_timeout"]) > 0
    # Non-empty, it would mark every standby down after a primary failover.
    assert conf["follow_primary_command"] == ""


def test_scram_auth_files() -> None:
    files = rendered()
    assert files["pool_passwd"] == "app:TEXTapp-secret\nmonitor:TEXTmonitor-secret\n"
    hba = [line.split() for line in files["pool_hba.conf"].splitlines() if line[:1] != "#"]
    assert hba == [["host", "all", "all", "127.0.0.1/32", "scram-sha-256"]]
    assert conf_of()["enable_pool_hba"] == "on"


def test_pcp_credentials() -> None:
    files = rendered()
    digest = hashlib.md5(b"pcp-secret").hexdigest()
    assert files["pcp.conf"] == f"{ADMIN_USER}:{digest}\n"
    assert files["pcppass"] == f"127.0.0.1:29898:{ADMIN_USER}:pcp-secret\n"


def test_the_failover_command_only_logs() -> None:
    script = rendered()["failover.sh"]
    assert script.startswith("#!/bin/sh\n")
    commands = [line for line in script.splitlines()[1:] if line and not line.startswith("#")]
    assert len(commands) == 1 and commands[0].startswith("echo ")


def test_options_override_defaults_once() -> None:
    conf = conf_of(options={"num_init_children": "8", "search_primary_node_timeout": "5"})
    assert conf["num_init_children"] == "8"
    assert conf["search_primary_node_timeout"] == "5"


def test_a_quote_in_a_password_is_refused() -> None:
    with pytest.raises(ProxyError, match=r"pgpool\.conf"):
        rendered(monitor_password="it's")


def test_argv_runs_in_the_foreground_with_every_file() -> None:
    proxy = PgpoolProxy(make_settings(), None, "/usr/sbin/pgpool")  # type: ignore[arg-type]
    w = SHORT_WORKDIR
    assert proxy.argv() == [
        "/usr/sbin/pgpool",
        "-n",
        "-f",
        f"{w}/pgpool.conf",
        "-F",
        f"{w}/pcp.conf",
        "-a",
        f"{w}/pool_hba.conf",
    ]


def test_reads_and_writes_share_the_port() -> None:
    proxy = PgpoolProxy(make_settings(), None, "/usr/sbin/pgpool")  # type: ignore[arg-type]
    assert proxy.ro_dsn == proxy.rw_dsn
    assert "port=26432" in proxy.rw_dsn


NODE_INFO = "".join(
    f"Hostname               : 127.0.0.1\nPort                   : {port}\n"
    f"Status                 : {code}\nWeight                 : 0.333333\n"
    f"Status Name            : {status}\nBackend Status Name    : unknown\n"
    f"Role                   : {role}\nBackend Role           : unknown\n"
    "Replication Delay      : 0\nReplication State      : none\n"
    "Replication Sync State : none\nLast Status Change     : 2026-11-22 06:38:19\n\n"
    for port, code, status, role in [
        (25432, 3, "down", "standby"),
        (25433, 2, "up", "primary"),
        (25434, 1, "waiting", "standby"),
    ]
)


def test_parse_node_info() -> None:
    assert parse_node_info(NODE_INFO) == [
        PoolNode(0, "127.0.0.1", 25432, "down", "standby"),
        PoolNode(1, "127.0.0.1", 25433, "up", "primary"),
        PoolNode(2, "127.0.0.1", 25434, "waiting", "standby"),
    ]
    assert [n.attached for n in parse_node_info(NODE_INFO)] == [False, True, True]


# -- live: a real Pgpool in front of pgha_cluster ------------------------------------------
TABLE = "pgha_pgpool_writes"
StartPgpool = Callable[..., PgpoolProxy]


@pytest.fixture
def start_pgpool(pgha_cluster: Cluster, pgha_sandbox: SandboxContext) -> Iterator[StartPgpool]:
    """Start Pgpool in front of the cluster; every one started is stopped at the end."""
    started: list[tuple[PgpoolProxy, list[int]]] = []

    def start(name: str, *, monitor: bool, options: dict[str, str] | None = None) -> PgpoolProxy:
        assert BINARY is not None
        settings, ports = proxy_settings(
            pgha_cluster, pgha_sandbox, "pgpool", monitor=monitor, options=options
        )
        # A directory per name: some tests need a long path on purpose.
        settings = replace(settings, workdir=pgha_sandbox.test_dir(name))
        proxy = PgpoolProxy(settings, pgha_sandbox, BINARY)
        started.append((proxy, ports))
        proxy.start()
        return proxy

    try:
        yield start
    finally:
        for proxy, ports in started:
            proxy.stop()
            for port in ports:
                pgha_sandbox.ports.release(port)


def write(dsn: str) -> int:
    """One committed INSERT through the proxy; the port of the server that took it."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
        row = conn.execute(
            f"INSERT INTO {TABLE} VALUES (clock_timestamp()) RETURNING inet_server_port()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def wait_for_writes(dsn: str, timeout: float) -> tuple[float, int]:
    """Seconds until a write commits through the proxy, and the port that took it."""
    started = time.monotonic()
    last: Exception | None = None
    while time.monotonic() - started < timeout:
        try:
            return time.monotonic() - started, write(dsn)
        except psycopg.Error as error:
            last = error
            time.sleep(0.01)
    raise AssertionError(f"no write committed through pgpool within {timeout}s: {last}")


class Writer:
    """A client writing in a loop through the proxy, reconnecting after each error, as
    an application would: it makes Pgpool meet the dead primary at once."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.commits: list[tuple[float, int]] = []  # (monotonic time, server port)
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pgpool-writer", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                port = write(self.dsn)
                self.commits.append((time.monotonic(), port))
            except psycopg.Error:
                self.errors += 1
                time.sleep(0.01)

    def first_commit_on(self, port: int, after: float, timeout: float) -> float:
        """When the first write after `after` committed on `port`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hits = [at for at, on in list(self.commits) if at >= after and on == port]
            if hits:
                return hits[0]
            time.sleep(0.01)
        raise AssertionError(f"no write committed on port {port} within {timeout}s")

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def wait_for_writer(proxy: PgpoolProxy, node: Node, timeout: float = 5.0) -> None:
    expected = f"127.0.0.1:{node.port}"
    deadline = time.monotonic() + timeout
    sample = proxy.sample()
    while time.monotonic() < deadline:
        sample = proxy.sample()
        if sample.writer == expected and sample.writer_state == WRITER_UP:
            return
        time.sleep(0.05)
    raise AssertionError(f"pgpool's sample never showed writer {expected}: {sample}")


def wait_nodes(
    proxy: PgpoolProxy, condition: Callable[[list[PoolNode]], bool], timeout: float = 5.0
) -> list[PoolNode]:
    """Pgpool's node list once condition holds (PCP restarts a second after a failover)."""
    deadline = time.monotonic() + timeout
    nodes: list[PoolNode] = []
    while time.monotonic() < deadline:
        try:
            nodes = proxy.nodes()
        except ProxyError:
            nodes = []
        if nodes and condition(nodes):
            return nodes
        time.sleep(0.05)
    raise AssertionError(f"pgpool's nodes never met the condition: {nodes}")


def prepare(proxy: PgpoolProxy, cluster: Cluster) -> None:
    with psycopg.connect(proxy.rw_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (at timestamptz)")
    assert write(proxy.rw_dsn) == cluster.primary.port
    cluster.wait_for_replay()


@live
def test_sample_is_fast_and_counts_app_sessions(
    pgha_cluster: Cluster, start_pgpool: StartPgpool
) -> None:
    proxy = start_pgpool("pgpool-sample", monitor=False)
    prepare(proxy, pgha_cluster)
    with psycopg.connect(proxy.rw_dsn, autocommit=True) as app:
        app.execute("SELECT 1")
        timings = []
        for _ in range(50):
            started = time.perf_counter()
            sample = proxy.sample()
            timings.append((time.perf_counter() - started) * 1000)
        assert sample.writer == f"127.0.0.1:{pgha_cluster.primary.port}"
        assert sample.writer_state == WRITER_UP
        assert sample.connections_in_use >= 1
    median = statistics.median(timings)
    print(f"\npgpool sample: median {median:.2f} ms, max {max(timings):.2f} ms")
    assert median < 20


@live
def test_stop_does_not_wait_for_clients(pgha_cluster: Cluster, start_pgpool: StartPgpool) -> None:
    proxy = start_pgpool("pgpool-stop", monitor=False)
    with psycopg.connect(proxy.rw_dsn, autocommit=True) as app:
        app.execute("SELECT 1")
        started = time.monotonic()
        proxy.stop()
        assert time.monotonic() - started < 5
    assert proxy.pid is None


@live
def test_explicit_path_rewire_after_promotion(
    pgha_cluster: Cluster, start_pgpool: StartPgpool
) -> None:
    # A name as long as sandbox slugs get: the sockets fall back to the relative dir.
    proxy = start_pgpool("explicit-" + "x" * 60, monitor=False)
    assert (proxy.settings.workdir / f".s.PGSQL.{proxy.settings.listen_port}").is_socket()
    prepare(proxy, pgha_cluster)
    old, new = pgha_cluster.primary, pgha_cluster.node("node1")

    old.kill()
    with pytest.raises(psycopg.OperationalError):
        write(proxy.rw_dsn)
    # failover_on_backend_error: the failed session detached the dead primary, and
    # Pgpool now looks for a primary once a second.
    assert wait_nodes(proxy, lambda nodes: nodes[0].status == "down")[0].port == old.port

    with Writer(proxy.rw_dsn) as writer:
        pgha_cluster.promote(new)
        promoted = time.monotonic()
        proxy.rewire("node1")
        rewired = time.monotonic()
        resumed = writer.first_commit_on(new.port, promoted, timeout=5)
    print(
        f"\npgpool explicit path: rewire() took {(rewired - promoted) * 1000:.0f} ms; writes "
        f"resumed {(resumed - promoted) * 1000:.0f} ms after the promotion"
    )
    assert write(proxy.rw_dsn) == new.port
    wait_for_writer(proxy, new)
    nodes = proxy.nodes()
    assert [(n.status, n.role) for n in nodes][:2] == [("down", "standby"), ("up", "primary")]
    assert nodes[2].attached  # still serving reads
    assert proxy.settings.primary.name == "node1"
    assert "pgha failover_command: detached node 0" in proxy.log_path.read_text()


@live
def test_monitor_path_finds_the_promoted_node_by_itself(
    pgha_cluster: Cluster, start_pgpool: StartPgpool
) -> None:
    """A client meets the dead primary at once (failover_on_backend_error): Pgpool
    detaches it and asks the others pg_is_in_recovery() once a second until one is
    the primary. No rewire()."""
    proxy = start_pgpool("pgpool-monitor", monitor=True)
    prepare(proxy, pgha_cluster)
    old, new = pgha_cluster.primary, pgha_cluster.node("node1")

    with Writer(proxy.rw_dsn) as writer:
        old.kill()
        killed = time.monotonic()
        pgha_cluster.promote(new)
        promoted = time.monotonic()
        resumed = writer.first_commit_on(new.port, promoted, timeout=10)
    print(
        f"\npgpool monitor path (writing): promotion took {(promoted - killed) * 1000:.0f} ms;"
        f" writes resumed {(resumed - promoted) * 1000:.0f} ms after the promotion "
        f"({(resumed - killed) * 1000:.0f} ms after the kill)"
    )
    assert write(proxy.rw_dsn) == new.port
    wait_for_writer(proxy, new)
    nodes = proxy.nodes()
    assert [(n.status, n.role) for n in nodes][:2] == [("down", "standby"), ("up", "primary")]
    assert nodes[2].attached


@live
def test_monitor_path_health_check_alone(pgha_cluster: Cluster, start_pgpool: StartPgpool) -> None:
    """No client at all: only the 1 s health check can notice the dead primary."""
    proxy = start_pgpool("pgpool-health-check", monitor=True)
    prepare(proxy, pgha_cluster)
    old, new = pgha_cluster.primary, pgha_cluster.node("node1")

    old.kill()
    killed = time.monotonic()
    pgha_cluster.promote(new)
    promoted = time.monotonic()
    deadline = promoted + 10
    while not _is_writer(proxy, 1) and time.monotonic() < deadline:
        time.sleep(0.02)
    switched = time.monotonic()
    assert _is_writer(proxy, 1), proxy.nodes()
    print(
        f"\npgpool monitor path (idle): promotion took {(promoted - killed) * 1000:.0f} ms;"
        f" Pgpool switched to node1 {(switched - promoted) * 1000:.0f} ms after the promotion "
        f"({(switched - killed) * 1000:.0f} ms after the kill)"
    )
    assert wait_for_writes(proxy.rw_dsn, timeout=5)[1] == new.port


def _is_writer(proxy: PgpoolProxy, node_id: int) -> bool:
    try:
        nodes = proxy.nodes()
    except ProxyError:  # PCP restarts a second after each failover
        return False
    return nodes[node_id].role == "primary" and nodes[node_id].attached


@live
def test_rewire_promotes_when_pgpool_gave_up_its_search(
    pgha_cluster: Cluster, start_pgpool: StartPgpool
) -> None:
    proxy = start_pgpool(
        "pgpool-gave-up", monitor=True, options={"search_primary_node_timeout": "1"}
    )
    prepare(proxy, pgha_cluster)
    old, new = pgha_cluster.primary, pgha_cluster.node("node1")

    old.kill()
    deadline = time.monotonic() + 10
    while proxy.nodes()[0].attached and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.5)  # the search's one second, then the failover ends without a primary
    assert not any(n.role == "primary" for n in proxy.nodes())

    pgha_cluster.promote(new)
    promoted = time.monotonic()
    proxy.rewire("node1")
    _, port = wait_for_writes(proxy.rw_dsn, timeout=5)
    print(
        f"\npgpool rewire through pcp_promote_node: writes resumed "
        f"{(time.monotonic() - promoted) * 1000:.0f} ms after the promotion"
    )
    assert port == new.port
    wait_for_writer(proxy, new)
