"""What a test asks of its cluster, validated before anything starts."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pytest_pgha.errors import PghaConfigError

SYNCHRONOUS_COMMIT_LEVELS = ("off", "local", "remote_write", "on", "remote_apply")
# Settings the harness owns: changing them would break the sandbox or its isolation.
RESERVED_SETTINGS = frozenset(
    {
        "port",
        "listen_addresses",
        "unix_socket_directories",
        "primary_conninfo",
        "primary_slot_name",
        "cluster_name",
        "hba_file",
        "data_directory",
        "synchronous_standby_names",
        "synchronous_commit",
    }
)
_SYNC_RE = re.compile(r"^\s*(FIRST|ANY)\s+(\d+)\s*\(([^)]*)\)\s*$", re.IGNORECASE)


def node_name(index: int) -> str:
    return f"node{index}"


@dataclass(frozen=True)
class SyncMode:
    """synchronous_standby_names in structured form: off, FIRST n (...) or ANY n (...)."""

    method: str  # "off", "FIRST" or "ANY"
    count: int = 0
    standbys: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.method != "off"

    def to_guc(self) -> str:
        if not self.enabled:
            return ""
        return f"{self.method} {self.count} ({', '.join(self.standbys)})"

    @classmethod
    def parse(cls, text: str, replica_names: tuple[str, ...]) -> SyncMode:
        if text.strip().lower() in ("", "off", "async"):
            return cls("off")
        match = _SYNC_RE.match(text)
        if not match:
            raise PghaConfigError.invalid(
                "synchronous",
                text,
                "write 'off', 'FIRST n (name, ...)' or 'ANY n (name, ...)', "
                f"or '*' for all replicas, e.g. 'ANY 1 (*)'; replicas are {replica_names}",
            )
        method, count = match.group(1).upper(), int(match.group(2))
        names = tuple(n.strip() for n in match.group(3).split(",") if n.strip())
        if names == ("*",):
            names = replica_names
        if len(set(names)) != len(names):
            raise PghaConfigError.invalid(
                "synchronous", text, "a standby is listed twice; name each one once"
            )
        unknown = [n for n in names if n not in replica_names]
        if unknown:
            raise PghaConfigError.invalid(
                "synchronous",
                text,
                f"{unknown} are not replicas of this cluster "
                f"(replicas: {list(replica_names)}); use their names or '*'",
            )
        if not 1 <= count <= len(names):
            raise PghaConfigError.invalid(
                "synchronous",
                text,
                f"{method} {count} needs between 1 and {len(names)} "
                f"of the {len(names)} listed standbys; add replicas or lower the count",
            )
        return cls(method, count, names)


@dataclass(frozen=True)
class ClusterSpec:
    replicas: int = 2
    synchronous: str = "off"
    synchronous_commit: str = "on"
    settings: Mapping[str, str] = field(default_factory=dict)
    scale: int = 1

    def __post_init__(self) -> None:
        valid_int = isinstance(self.replicas, int) and not isinstance(self.replicas, bool)
        if not valid_int or not 0 <= self.replicas <= 8:
            raise PghaConfigError.invalid(
                "replicas", self.replicas, "give a number of streaming replicas from 0 to 8"
            )
        if self.synchronous_commit not in SYNCHRONOUS_COMMIT_LEVELS:
            raise PghaConfigError.invalid(
                "synchronous_commit",
                self.synchronous_commit,
                f"use one of {', '.join(SYNCHRONOUS_COMMIT_LEVELS)}",
            )
        if not isinstance(self.scale, int) or not 1 <= self.scale <= 100:
            raise PghaConfigError.invalid(
                "scale", self.scale, "the pgbench scale is an integer from 1 to 100"
            )
        reserved = sorted(set(self.settings) & RESERVED_SETTINGS)
        if reserved:
            raise PghaConfigError.invalid(
                "settings",
                reserved,
                "the harness sets these itself; use the factory's "
                "synchronous/synchronous_commit options or the node/cluster API",
            )
        self.sync_mode()  # validates

    @property
    def replica_names(self) -> tuple[str, ...]:
        return tuple(node_name(i) for i in range(1, self.replicas + 1))

    def sync_mode(self) -> SyncMode:
        return SyncMode.parse(self.synchronous, self.replica_names)
