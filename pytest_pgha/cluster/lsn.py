"""PostgreSQL LSNs ('16/B374D848') as comparable integers."""

from __future__ import annotations


def lsn_to_int(lsn: str | None) -> int | None:
    if lsn is None:
        return None
    high, _, low = str(lsn).partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def int_to_lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
