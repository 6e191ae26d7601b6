"""Is a postmaster answering? Sends an SSLRequest and waits for its one-byte answer.

A TCP connect alone is not enough: a frozen (SIGSTOPped) postmaster's kernel still
accepts connections. No authentication is involved, so probing costs the server
nothing and needs no password.
"""

from __future__ import annotations

import socket
import struct

_SSL_REQUEST = struct.pack("!II", 8, 80877103)


def postmaster_answers(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(_SSL_REQUEST)
            return sock.recv(1) in (b"S", b"N")
    except OSError:
        return False
