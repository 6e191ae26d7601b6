"""Samples a proxy's view of the writer in the background, every interval."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pytest_pgha.lag import LagMeter, prioritise
from pytest_pgha.proxies.samples import ProxySample

DEFAULT_INTERVAL_S = 0.1


class Sampler:
    def __init__(
        self,
        probe: Callable[[], ProxySample],
        interval_s: float = DEFAULT_INTERVAL_S,
        on_error: Callable[[], ProxySample] | None = None,
        lag: LagMeter | None = None,
    ) -> None:
        if not 0.001 <= interval_s <= 0.1:
            raise ValueError("the sampler interval is between 1 ms and 100 ms")
        self._probe = probe
        self._on_error = on_error
        self._interval_ns = int(interval_s * 1e9)
        self._lag = lag or LagMeter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pgha-sampler", daemon=True)
        self.samples: list[ProxySample] = []

    def _run(self) -> None:
        prioritise()
        next_at = time.monotonic_ns()
        while not self._stop.is_set():
            try:
                self.samples.append(self._probe())
            except Exception:  # the probe failing is data (the seed's -1), not a crash
                if self._on_error is not None:
                    self.samples.append(self._on_error())
            next_at += self._interval_ns
            if self._lag.sleep_until(next_at, "sample", self._stop):
                return

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
