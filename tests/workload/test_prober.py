"""The restart-window summary, on synthetic probes."""

from pytest_pgha.metrics.restart import summarise
from pytest_pgha.workload.prober import Probe


def probes(pattern, start=0, step=2000, latency=500):
    return [
        Probe(start + i * step, start + i * step + latency, ok == "o")
        for i, ok in enumerate(pattern)
    ]


def test_no_failure_means_no_unavailability():
    report = summarise(probes("oooo"), inject_us=0)
    assert report.failed == 0 and report.unavailable_ms == 0.0


def test_unavailable_spans_last_good_to_first_good_after():
    # ok at 0, 2, fail at 4, 6, 8 ms, ok at 10 ms.
    report = summarise(probes("ooxxxo"), inject_us=3000)
    assert report.ok == 3 and report.failed == 3
    assert report.unavailable_ms == (10_500 - 2_500) / 1000
    assert report.first_failure_after_inject_ms == (4_500 - 3_000) / 1000


def test_never_recovered_is_none():
    report = summarise(probes("ooxx"), inject_us=0)
    assert report.unavailable_ms is None


def test_histogram_counts_every_good_probe():
    report = summarise(probes("oooxo", latency=300), inject_us=0)
    assert sum(report.histogram.values()) == 4
    assert report.histogram == {"[0.3ms, 0.4ms)": 4}
