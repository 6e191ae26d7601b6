"""Where the stack's processes live: an unprivileged user, reserved ports, a registry
of everything started (so a killed run's orphans can be reaped), managed processes."""
