"""Pgpool-II 4.3 in streaming-replication mode: one port for reads and writes (SELECTs
are load-balanced over the standbys), PCP on settings.admin_port.

Pgpool promotes nothing here (the harness's HA manager does); it only detaches a node
and then looks for the primary itself, asking every live node pg_is_in_recovery()
(find_primary_node() in src/main/pgpool_main.c; docs: pcp_node_info, "actual backend
role (taken from pg_is_in_recovery)"; sr_check_user "is used ... for the
identification of the primary server"). It searches only inside a failover (a node
detached, attached or promoted through it): a promotion alone goes unnoticed, and a
search that outlasts search_primary_node_timeout leaves it without a primary for good.
Two paths:

- explicit (settings.monitor False): no health check; rewire() detaches the old
  primary with pcp_detach_node unless Pgpool already did, which makes Pgpool search
  again and find the promoted node.
- monitor (settings.monitor True): a 1 s health check detaches the dead primary even
  when no client meets it; the search then retries once a second until the promoted
  node answers pg_is_in_recovery() = f (search_primary_node_timeout bounds it).

Both keep Pgpool's default failover_on_backend_error = on (and failover on a backend's
shutdown): the first child that cannot reach the primary detaches it. With it off,
each child that fails to reach the dead primary exits, the main process restarts it,
and while clients keep reconnecting the main process stays in its loop reaping and
forking children (reaper() in pgpool_main.c) and does not act on a pcp_detach_node:
measured with 8 clients retrying every 10 ms beside 3 busy processes, the detach took
1.4-4.8 s; in the failover suite under -n 4 it went unanswered for 15 s in about one
Pgpool-II trial in twenty.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import psycopg
from psycopg.conninfo import make_conninfo

from pytest_pgha.errors import ProxyError
from pytest_pgha.proxies.admin import AdminConsole
from pytest_pgha.proxies.base import Proxy, ProxySettings, find_program, wait_listening
from pytest_pgha.proxies.samples import UNKNOWN, WRITER_DOWN, WRITER_UP, ProxySample
from pytest_pgha.sandbox.context import SandboxContext
from pytest_pgha.timeline import now_epoch_us

CONFIG_FILE = "pgpool.conf"
PCP_CONF = "pcp.conf"
HBA_FILE = "pool_hba.conf"
PASSWD_FILE = "pool_passwd"
PCPPASS_FILE = "pcppass"
FAILOVER_SCRIPT = "failover.sh"
PID_FILE = "pgpool.pid"

# The PCP user lives in pcp.conf only: it is no PostgreSQL role.
ADMIN_USER = "admin"
# sockaddr_un.sun_path holds 108 bytes with the terminating NUL (pgpool_main.c checks it).
SUN_PATH_MAX = 107
PCP_TIMEOUT_S = 5.0
# After a detach, Pgpool asks the nodes pg_is_in_recovery() once a second: a node
# promoted before rewire() is found in the first or second round.
SEARCH_WAIT_S = 2.5
# After pcp_promote_node Pgpool restarts every child; children stuck on a frozen old
# primary make that slow.
PROMOTE_WAIT_S = 10.0
# A detach Pgpool has not acted on is asked for again after DETACH_WAIT_S, in all
# as long as PROMOTE_WAIT_S.
DETACH_WAIT_S = 2.5
DETACH_ATTEMPTS = 4
# The sampler: libpq's smallest connect_timeout, a pause between reconnects, and a
# bound on the PCP fallback.
PROBE_CONNECT_TIMEOUT_S = 2
SQL_RETRY_S = 1.0
PCP_SAMPLE_TIMEOUT_S = 1.0

# Failover-friendly values (docs: runtime-config-*.html); each can be overridden through
# ProxySettings.options, with values written as pgpool.conf wants them.
DEFAULTS: dict[str, str] = {
    "num_init_children": "32",
    # Connection slots per child (user/database pairs): app and monitor.
    "max_pool": "2",
    "load_balance_mode": "on",
    # connect() to a backend, in ms (10 s by default): also bounds a frozen node.
    "connect_timeout": "1000",
    # How long a failover keeps asking for a primary (once a second) before it gives up
    # for good: it must outlast the HA manager's promotion.
    "search_primary_node_timeout": "30",
    # A non-empty follow_primary_command (and pcp_promote_node) marks every standby
    # down after a primary failover; the standbys keep serving reads here.
    "follow_primary_command": "''",
    "failback_command": "''",
    "auto_failback": "off",
    "detach_false_primary": "off",
    "use_watchdog": "off",
    "memory_cache_enabled": "off",
    "log_destination": "'stderr'",
    "logging_collector": "off",
    "log_line_prefix": "'%m: %a pid %p: '",
    "log_connections": "off",
}

HBA = """\
# pytest-pgha: its own host only; pool_passwd holds the passwords Pgpool uses for SCRAM.
host all all {host}/32 scram-sha-256
"""

# Pgpool only detaches: the HA manager of the harness promotes. The line lands in
# pgpool.log (the script's stdout is Pgpool's), for the timeline of a failure.
FAILOVER_SCRIPT_TEXT = """\
#!/bin/sh
# pytest-pgha: log only. Arguments: %d %h %p %m %P (see failover_command).
echo "pgha failover_command: detached node $1 ($2:$3), new main node $4, old primary $5"
"""


@dataclass(frozen=True)
class PoolNode:
    """One row of Pgpool's node list, as Pgpool itself sees the node."""

    node_id: int
    host: str
    port: int
    status: str  # up, waiting, down, unused
    role: str  # primary or standby

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def attached(self) -> bool:
        return self.status in ("up", "waiting")


class PgpoolProxy(Proxy):
    kind: ClassVar[str] = "pgpool"
    program: ClassVar[str] = "pgpool"
    install_hint: ClassVar[str] = "apt-get install pgpool2"
    has_monitor: ClassVar[bool] = True
    splits_reads: ClassVar[bool] = True

    def __init__(self, settings: ProxySettings, context: SandboxContext, binary: str) -> None:
        super().__init__(settings, context, binary)
        self._sampler: AdminConsole | None = None
        self._sql_retry_at = 0.0

    # -- configuration -------------------------------------------------------------------
    def render(self) -> dict[str, str]:
        s = self.settings
        return {
            CONFIG_FILE: self._conf(),
            HBA_FILE: HBA.format(host=s.listen_host),
            PASSWD_FILE: self._pool_passwd(),
            PCP_CONF: f"{ADMIN_USER}:{_md5(s.admin_password)}\n",
            PCPPASS_FILE: (
                f"{s.listen_host}:{s.admin_port}:{ADMIN_USER}:{_pcppass(s.admin_password)}\n"
            ),
            FAILOVER_SCRIPT: FAILOVER_SCRIPT_TEXT,
        }

    def _conf(self) -> str:
        values = {
            **self._core(),
            **self._backends(),
            **self._checks(),
            **DEFAULTS,
            **self.settings.options,
        }
        return "".join(f"{key} = {value}\n" for key, value in values.items())

    def _core(self) -> dict[str, str]:
        s = self.settings
        workdir = s.workdir
        return {
            "backend_clustering_mode": "'streaming_replication'",
            "listen_addresses": _quote(s.listen_host),
            "port": str(s.listen_port),
            "socket_dir": _quote(self.socket_dir(s.listen_port)),
            "pcp_listen_addresses": _quote(s.listen_host),
            "pcp_port": str(s.admin_port),
            "pcp_socket_dir": _quote(self.socket_dir(s.admin_port)),
            "pid_file_name": _quote(str(workdir / PID_FILE)),
            # logdir holds pgpool_status, the node states that survive a restart.
            "logdir": _quote(str(workdir)),
            "enable_pool_hba": "on",
            "pool_passwd": _quote(PASSWD_FILE),  # relative to pgpool.conf's directory
            "allow_clear_text_frontend_auth": "off",
            "failover_command": _quote(f"{workdir / FAILOVER_SCRIPT} %d %h %p %m %P"),
        }

    def _backends(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for index, backend in enumerate(self.settings.backends):
            values |= {
                f"backend_hostname{index}": _quote(backend.host),
                f"backend_port{index}": str(backend.port),
                f"backend_weight{index}": "1",
                f"backend_flag{index}": "'ALLOW_TO_FAILOVER'",
                # The walreceiver's name (the cluster sets application_name = node
                # name): it fills replication_state in SHOW POOL_NODES.
                f"backend_application_name{index}": _quote(backend.name),
            }
        return values

    def _checks(self) -> dict[str, str]:
        s = self.settings
        password = _quote(f"TEXT{s.monitor_password}")
        monitor = s.monitor
        return {
            # The streaming-replication check also names the primary after a failover.
            "sr_check_period": "1",
            "sr_check_user": _quote(s.monitor_user),
            "sr_check_password": password,
            "sr_check_database": _quote(s.database),
            "delay_threshold": "0",
            "health_check_period": "1" if monitor else "0",
            "health_check_timeout": "1",
            "health_check_user": _quote(s.monitor_user),
            "health_check_password": password,
            "health_check_database": _quote(s.database),
            "health_check_max_retries": "0",
            "health_check_retry_delay": "1",
            # On in both paths (Pgpool's default): see the module's docstring.
            "failover_on_backend_error": "on",
            "failover_on_backend_shutdown": "on",
        }

    def _pool_passwd(self) -> str:
        s = self.settings
        # Plain text (TEXT prefix): Pgpool needs the password itself to do SCRAM with
        # both the client and the backends (docs: auth-methods, 6.2.4.1).
        users = {s.app_user: s.app_password, s.monitor_user: s.monitor_password}
        for user, password in users.items():
            if any(c in user + password for c in ":\n"):
                raise ProxyError(f"pool_passwd cannot hold user {user!r}: ':' or newline")
        return "".join(f"{user}:TEXT{password}\n" for user, password in users.items())

    def socket_dir(self, port: int) -> str:
        """The workdir when the socket's path fits in sun_path, else "." (Pgpool runs
        in the workdir and does not chdir in the foreground)."""
        path = f"{self.settings.workdir}/.s.PGSQL.{port}"
        return str(self.settings.workdir) if len(path) <= SUN_PATH_MAX else "."

    def argv(self) -> list[str]:
        # No -D: a fresh workdir has no pgpool_status, and after a restart the file
        # keeps a detached (dead) old primary detached, as in a real deployment.
        workdir = self.settings.workdir
        return [
            self.binary,
            "-n",
            "-f",
            str(workdir / CONFIG_FILE),
            "-F",
            str(workdir / PCP_CONF),
            "-a",
            str(workdir / HBA_FILE),
        ]

    def env(self) -> dict[str, str]:
        # HOME: Pgpool looks for ~/.pgpoolkey (AES passwords), which we do not use.
        return {**super().env(), "HOME": str(self.settings.workdir)}

    # -- life cycle -------------------------------------------------------------------
    def after_start(self) -> None:
        # PCP starts after the client port: rewire() right after start needs it.
        if self.process is not None:
            wait_listening(self.settings.admin_port, self.process)
        self._sampler = AdminConsole(self._monitor_dsn())

    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
        if self.process is not None:
            # SIGTERM is Pgpool's smart shutdown, which waits for every client to leave;
            # SIGINT is the fast one (main.c, -m fast).
            self.process.stop(signal.SIGINT, timeout=10)

    def forget_state(self) -> None:
        # pgpool_status keeps detached nodes detached across restarts (see argv).
        (self.settings.workdir / "pgpool_status").unlink(missing_ok=True)

    @property
    def ro_dsn(self) -> str | None:
        # The same port: Pgpool sends SELECTs outside write transactions to a standby.
        return self.rw_dsn

    def _monitor_dsn(self) -> str:
        s = self.settings
        return make_conninfo(
            host=s.listen_host,
            port=str(s.listen_port),
            dbname=s.database,
            user=s.monitor_user,
            password=s.monitor_password,
            connect_timeout=str(PROBE_CONNECT_TIMEOUT_S),
            application_name="pgha_sampler",
        )

    # -- PCP ---------------------------------------------------------------------------
    def pcp(self, command: str, *args: str, timeout: float = PCP_TIMEOUT_S) -> str:
        """Run a pcp_* client against this Pgpool; its stdout."""
        program = find_program(command) or command
        argv = [
            program,
            "-h",
            self.settings.listen_host,
            "-p",
            str(self.settings.admin_port),
            "-U",
            ADMIN_USER,
            "-w",
            *args,
        ]
        env = {**os.environ, "PCPPASSFILE": str(self.settings.workdir / PCPPASS_FILE)}
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, env=env, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as error:
            raise ProxyError(f"{command} {' '.join(args)} timed out after {timeout}s") from error
        if done.returncode != 0:
            raise ProxyError(
                f"{command} {' '.join(args)} failed ({done.returncode}): "
                f"{(done.stderr or done.stdout).strip()}"
            )
        return done.stdout

    def nodes(self, timeout: float = PCP_TIMEOUT_S) -> list[PoolNode]:
        """Every node as Pgpool sees it (pcp_node_info -a; -v names the fields)."""
        return parse_node_info(self.pcp("pcp_node_info", "-a", "-v", timeout=timeout))

    # -- failover ------------------------------------------------------------------------
    def rewire(self, new_primary: str) -> None:
        """Make Pgpool write to new_primary, which the HA manager already promoted.

        pcp_detach_node on the old primary is a failover: Pgpool marks it down and asks
        the other nodes pg_is_in_recovery() (retrying once a second), so it takes the
        promoted node as primary and keeps the other standbys for reads. Only if
        Pgpool has no primary at all (its search gave up) is pcp_promote_node used:
        it also marks every other standby down (docs: pcp_promote_node)."""
        target = self._node_id(new_primary)
        # The primary it was told of, whatever role Pgpool shows for it right now: its
        # streaming-replication check of a frozen (then fenced) node may not have
        # named it primary yet, and an attached old primary blocks the promotion.
        previous = self._node_id(self.settings.primary.name)
        nodes = self._nodes_until(time.monotonic() + PCP_TIMEOUT_S)
        if not _is_primary(nodes, target):
            stale = [
                n
                for n in nodes
                if (n.role == "primary" or n.node_id == previous) and n.node_id != target
            ]
            for node in stale:
                if node.attached:
                    self.pcp("pcp_detach_node", "-n", str(node.node_id))
            if not self._wait_primary(target, SEARCH_WAIT_S):
                self._promote(target)
        self.settings = self.settings.with_primary(new_primary)

    def _promote(self, target: int) -> None:
        # A detached node may still carry the "primary" label it had when it went
        # down (a frozen primary): only an attached one competes with the target. On a
        # busy runner Pgpool may still be carrying out the detach, and during a storm
        # of child restarts it was seen never to act on it: wait, asking again.
        def rivals(nodes: list[PoolNode]) -> list[PoolNode]:
            return [n for n in nodes if n.role == "primary" and n.attached and n.node_id != target]

        for _ in range(DETACH_ATTEMPTS):
            if self._wait_nodes(lambda nodes: not rivals(nodes), DETACH_WAIT_S) is not None:
                break
            for rival in rivals(self._nodes_until(time.monotonic() + PCP_TIMEOUT_S)):
                # A refusal here (Pgpool busy with that very failover) is no answer yet.
                with contextlib.suppress(ProxyError):
                    self.pcp("pcp_detach_node", "-n", str(rival.node_id))
        else:
            raise ProxyError(
                f"pgpool keeps another primary than node {target}: {self.nodes()}; "
                f"its failover log:\n{self._failover_log()}"
            )
        try:
            self.pcp("pcp_promote_node", "-n", str(target))
        except ProxyError:
            # A search that was still running may have found it meanwhile: Pgpool then
            # refuses to promote a node that is already its primary.
            if not _is_primary(self.nodes(), target):
                raise
        if not self._wait_primary(target, PROMOTE_WAIT_S):
            raise ProxyError(f"pgpool did not take node {target} as primary: {self.nodes()}")

    def _failover_log(self) -> str:
        lines = (
            self.log_path.read_text(errors="replace").splitlines() if self.log_path.exists() else []
        )
        wanted = ("degenerate", "failover", "find_primary", "promot")
        return "\n".join(line for line in lines if any(w in line for w in wanted))

    def _node_id(self, name: str) -> int:
        for index, backend in enumerate(self.settings.backends):
            if backend.name == name:
                return index
        raise ProxyError(f"no backend {name!r} in {[b.name for b in self.settings.backends]}")

    def _nodes_until(self, deadline: float) -> list[PoolNode]:
        # PCP is restarted about a second after each failover (pgpool_main.c sleeps
        # 1 s, then restarts the PCP child): retry through that gap.
        while True:
            try:
                return self.nodes()
            except ProxyError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def _wait_primary(self, target: int, timeout: float) -> bool:
        return self._wait_nodes(lambda nodes: _is_primary(nodes, target), timeout) is not None

    def _wait_nodes(
        self, condition: Callable[[list[PoolNode]], bool], timeout: float
    ) -> list[PoolNode] | None:
        """Poll Pgpool's node list until condition holds (returns it) or timeout (None)."""
        deadline = time.monotonic() + timeout
        while True:
            nodes = self._nodes_until(deadline + PCP_TIMEOUT_S)
            if condition(nodes):
                return nodes
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    # -- sampling ------------------------------------------------------------------------
    def sample(self) -> ProxySample:
        """The writer as Pgpool sees it: SQL on a kept-open session when it works, else
        pcp_node_info (a session cannot be opened while the primary Pgpool still
        uses is dead and not detached: the explicit path's window before rewire)."""
        if self._sampler is not None and time.monotonic() >= self._sql_retry_at:
            try:
                return self._sample_sql(self._sampler)
            except (psycopg.Error, ProxyError):
                # Reconnecting can block for connect_timeout while Pgpool restarts its
                # children: try again in a second, PCP meanwhile.
                self._sql_retry_at = time.monotonic() + SQL_RETRY_S
        try:
            return self._sample_pcp()
        except ProxyError:
            return self.failed_sample()

    def _sample_sql(self, console: AdminConsole) -> ProxySample:
        # SHOW POOL_BACKEND_STATS has SHOW POOL_NODES' node id, host, port, status and
        # role columns (docs: SHOW POOL_BACKEND_STATS), all from shared memory; SHOW
        # POOL_NODES may also open a connection to each node for pg_role per call
        # (db_node_role() in pool_process_reporting.c).
        rows = console.query("SHOW POOL_BACKEND_STATS")
        processes = console.query("SHOW POOL_PROCESSES")
        # Pgpool pools per session: a child with an app client holds a connection to
        # the primary for as long as the client stays.
        in_use = sum(
            1
            for p in processes
            if p.get("username") == self.settings.app_user
            and p.get("status") not in (None, "", "Wait for connection")
        )
        primary = next((r for r in rows if r.get("role") == "primary"), None)
        if primary is None:
            return ProxySample(now_epoch_us(), None, WRITER_DOWN, in_use)
        return ProxySample(
            now_epoch_us(),
            f"{primary.get('hostname')}:{primary.get('port')}",
            _writer_state(primary.get("status")),
            in_use,
        )

    def _sample_pcp(self) -> ProxySample:
        nodes = self.nodes(timeout=PCP_SAMPLE_TIMEOUT_S)
        primary = next((n for n in nodes if n.role == "primary"), None)
        if primary is None:
            return ProxySample(now_epoch_us(), None, WRITER_DOWN, UNKNOWN)
        return ProxySample(now_epoch_us(), primary.address, _writer_state(primary.status), UNKNOWN)


def _quote(value: str) -> str:
    # pgpool.conf's lexer takes '...' without any escape for a quote (pool_config.l).
    if any(c in value for c in "'\n\\"):
        raise ProxyError(f"cannot write {value!r} into pgpool.conf: quote, backslash or newline")
    return f"'{value}'"


def _md5(password: str) -> str:
    # pcp.conf wants what pg_md5 prints: the bare md5 of the password (not PostgreSQL's
    # md5 of password + user).
    return hashlib.md5(password.encode()).hexdigest()


def _is_primary(nodes: list[PoolNode], node_id: int) -> bool:
    return nodes[node_id].role == "primary" and nodes[node_id].attached


def _writer_state(status: str | None) -> int:
    # "waiting": attached, no client used it yet (docs: pcp_node_info).
    return WRITER_UP if status in ("up", "waiting") else WRITER_DOWN


def _pcppass(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:")


def parse_node_info(text: str) -> list[PoolNode]:
    """pcp_node_info -a -v: "Field : value" lines (pcp_frontend_client.c pads the field
    names), a blank line after each node, nodes in id order."""
    return [_node(index, block) for index, block in enumerate(_blocks(text))]


def _blocks(text: str) -> list[dict[str, str]]:
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, _, value = line.partition(":")
        current[key.strip()] = value.strip()
    return blocks


def _node(index: int, fields: dict[str, str]) -> PoolNode:
    return PoolNode(
        index,
        fields.get("Hostname", ""),
        int(fields.get("Port", "0") or 0),
        fields.get("Status Name", ""),
        fields.get("Role", ""),
    )
