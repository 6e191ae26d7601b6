"""What the proxy sampler saw: one sample of the proxy's view of the writer per tick.

The proxies package produces these (e.g. ProxySQL's ``pgsql_servers`` / ``stats_pgsql_
connection_pool`` polled at 10 Hz); the report draws them under the transaction log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WRITER_UP = 1
WRITER_DOWN = 0
# The probe of the proxy's admin interface failed: the sample says nothing about the
# backend, so charts must not draw it as "down" (the seed's alternating -1 samples).
PROBE_FAILED = -1
# connections_in_use when the proxy did not report it.
UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class ProxySample:
    epoch_us: int  # wall clock, microseconds since the epoch (same clock as TxRecord)
    writer: str | None  # host:port the proxy routes writes to, as the proxy reports it
    writer_state: int  # WRITER_UP, WRITER_DOWN or PROBE_FAILED
    connections_in_use: int  # backend connections busy on the writer; UNKNOWN if not reported

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch_us": self.epoch_us,
            "writer": self.writer,
            "writer_state": self.writer_state,
            "connections_in_use": self.connections_in_use,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProxySample:
        writer = data.get("writer")
        return cls(
            epoch_us=int(data["epoch_us"]),
            writer=None if writer is None else str(writer),
            writer_state=int(data["writer_state"]),
            connections_in_use=int(data.get("connections_in_use", UNKNOWN)),
        )
