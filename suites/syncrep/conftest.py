"""The synchronous-replication suite's clusters: every standby streams through a
toxiproxy link (pgha_replication_links), so that a test can make a standby unreachable
(`link.cut()`), or far away (`link.latency(ms)`), without touching its process."""

import threading
from collections.abc import Callable, Generator
from typing import Any

import pytest

from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory

QUICK = {"wal_retrieve_retry_interval": "100ms"}

sync_pair = pgha_cluster_factory(replicas=1, synchronous="FIRST 1 (*)", settings=QUICK)
# node1 synchronous, node2 asynchronous.
first_of_trio = pgha_cluster_factory(replicas=2, synchronous="FIRST 1 (node1)", settings=QUICK)
# Both standbys synchronous, changes applied before COMMIT returns.
both_apply = pgha_cluster_factory(
    replicas=2,
    synchronous="FIRST 2 (node1, node2)",
    synchronous_commit="remote_apply",
    settings=QUICK,
)
quorum_trio = pgha_cluster_factory(replicas=2, synchronous="ANY 1 (*)", settings=QUICK)


@pytest.fixture
def pgha_cluster(request: pytest.FixtureRequest):
    """The cluster a test names with @pytest.mark.parametrize("pgha_cluster", [...],
    indirect=True)."""
    return request.getfixturevalue(getattr(request, "param", "sync_pair"))


@pytest.fixture
def table(pgha_cluster):
    """A table t(id, v) with row 1 = 0, on every node."""
    primary = pgha_cluster.primary
    primary.sql("CREATE TABLE IF NOT EXISTS t (id int PRIMARY KEY, v int)")
    primary.sql("INSERT INTO t VALUES (1, 0) ON CONFLICT (id) DO UPDATE SET v = 0")
    pgha_cluster.wait_for_replay()
    return "t"


class InBackground:
    """A statement run on its own connection in a thread: the commit that waits."""

    def __init__(self, run: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(run,), daemon=True)
        self._thread.start()

    def _run(self, run: Callable[[], Any]) -> None:
        try:
            self.result = run()
        except BaseException as error:  # handed to the test
            self.error = error

    def join(self, timeout: float = 30) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the statement did not return"
        if self.error is not None:
            raise self.error
        return self.result

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()


@pytest.fixture
def in_background() -> Generator[Callable[[Callable[[], Any]], InBackground], None, None]:
    started: list[InBackground] = []

    def start(run: Callable[[], Any]) -> InBackground:
        started.append(InBackground(run))
        return started[-1]

    yield start
