"""Under pytest -n 4, workers never collide on ports or directories."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from sandbox_helpers import NOTHING_LEFT, inner_bindir, leftovers

CLUSTERS_ON_EVERY_WORKER = """
import json, os, time
import pytest
from pytest_pgha.plugin.cluster_fixtures import pgha_cluster_factory

small = pgha_cluster_factory(replicas=1)


@pytest.mark.parametrize("i", range(8))
def test_cluster(small, i):
    started = time.time()
    small.primary.sql("CREATE TABLE t AS SELECT 1 AS id")
    small.wait_for_replay()
    time.sleep(0.3)  # let the workers' clusters overlap
    record = {
        "worker": os.environ["PYTEST_XDIST_WORKER"],
        "ports": [node.port for node in small.nodes],
        "dirs": [str(node.datadir) for node in small.nodes],
        "start": started,
        "end": time.time(),
    }
    with open(os.environ["PGHA_TEST_RECORDS"], "a") as out:
        out.write(json.dumps(record) + "\\n")
"""


def test_four_workers_never_collide(
    pytester: pytest.Pytester, inner_basedir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records_file = pytester.path / "records.jsonl"
    monkeypatch.setenv("PGHA_TEST_RECORDS", str(records_file))
    pytester.makepyfile(test_parallel=CLUSTERS_ON_EVERY_WORKER)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:randomly",
        "-n",
        "4",
        f"--pgha-basedir={inner_basedir}",
        f"--pgha-pg-bindir={inner_bindir()}",
    )
    result.assert_outcomes(passed=8)
    records = [json.loads(line) for line in records_file.read_text().splitlines()]
    assert len({r["worker"] for r in records}) >= 2  # really in parallel
    every_dir = [d for r in records for d in r["dirs"]]
    assert len(every_dir) == len(set(every_dir)) == 16
    overlapping = 0
    for a, b in itertools.combinations(records, 2):
        if a["start"] < b["end"] and b["start"] < a["end"]:
            overlapping += 1
            assert not set(a["ports"]) & set(b["ports"]), (a, b)
    assert overlapping > 0
    assert leftovers(inner_basedir) == NOTHING_LEFT
