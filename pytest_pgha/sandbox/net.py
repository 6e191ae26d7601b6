"""Where the sandbox's servers listen: loopback only, so nothing outside the machine
reaches them. The one place that address is written; everything else asks a node,
a proxy's settings or a transport for its host."""

LOOPBACK = "127.0.0.1"
