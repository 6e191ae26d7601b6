"""The failover suite's shared settings."""

import pytest

# Transactions per second of each test's workload. Unthrottled, one test saturates
# both cores of a small CI machine, and four of them under `-n 4` would measure the
# scheduler rather than the stack. 1000/s is still 100 transactions per 100 ms bucket.
RATE = 1000.0
WARMUP_S = 1.5
SETTLE_S = 1.5


@pytest.fixture
def trial() -> dict[str, float]:
    """Keyword arguments shared by the suite's failover trials."""
    return {"rate": RATE, "warmup_s": WARMUP_S, "settle_s": SETTLE_S}
