"""postgresql.conf, pg_hba.conf and the per-node include file the harness writes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pytest_pgha.sandbox.net import LOOPBACK

NODE_CONF = "pgha-node.conf"

# Small and quick: a sandbox of three nodes fits in ~200 MB. fsync=off is safe for
# the faults this harness injects (process kills keep the OS page cache); it only
# loses data on an OS crash, which no test here causes.
BASE_SETTINGS: dict[str, str] = {
    "listen_addresses": f"'{LOOPBACK}'",
    "unix_socket_directories": "''",
    "max_connections": "100",
    "shared_buffers": "16MB",
    "wal_level": "replica",
    "max_wal_senders": "10",
    "max_replication_slots": "10",
    "hot_standby": "on",
    "hot_standby_feedback": "on",
    "wal_log_hints": "on",  # pg_rewind needs it (or data checksums)
    "track_commit_timestamp": "on",  # server-side cross-check of the write gap
    "wal_receiver_status_interval": "1s",
    "fsync": "off",
    "full_page_writes": "on",
    "min_wal_size": "32MB",
    # A failed primary rejoins from where the timelines forked: keep that WAL around
    # (its slot is only created when it rejoins). Patroni-managed clusters do the same.
    "wal_keep_size": "64MB",
    "max_wal_size": "256MB",
    "checkpoint_timeout": "30min",
    "password_encryption": "'scram-sha-256'",
    "log_line_prefix": "'%m [%p] %q%a '",
    "log_min_messages": "warning",
    "log_checkpoints": "off",
    # mmap: segments live in the data directory's pg_dynshmem and go with it. posix
    # ones live in /dev/shm, and every immediate shutdown or crash leaks some there.
    "dynamic_shared_memory_type": "mmap",
    "max_worker_processes": "4",
    "max_parallel_workers": "0",
}

HBA = f"""\
# pytest-pgha: loopback only, passwords hashed with SCRAM.
host all         all        {LOOPBACK}/32 scram-sha-256
host replication replicator {LOOPBACK}/32 scram-sha-256
"""


def render_settings(settings: Mapping[str, str]) -> str:
    return "".join(f"{name} = {value}\n" for name, value in settings.items())


def quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def conf_value(value: object) -> str:
    """A Python value as a postgresql.conf value (numbers bare, the rest quoted)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int | float):
        return str(value)
    return quote(str(value))


def write_base_conf(datadir: Path) -> None:
    with (datadir / "postgresql.conf").open("a") as conf:
        conf.write("\n# pytest-pgha\n")
        conf.write(render_settings(BASE_SETTINGS))
        conf.write(f"include_if_exists = '{NODE_CONF}'\n")
    (datadir / "pg_hba.conf").write_text(HBA)


def write_node_conf(datadir: Path, settings: Mapping[str, str]) -> None:
    (datadir / NODE_CONF).write_text(render_settings(settings))
