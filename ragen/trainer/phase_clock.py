"""Seconds per phase of one training step, as the ``timing/*`` metrics.

clock = PhaseClock()
with clock("rollout"):
    ...
clock.metrics()   # {"timing/rollout": 1.2, ..., "timing/step": <their sum>}
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class PhaseClock:
    """Wall seconds of each phase run under ``clock(name)`` (a phase timed twice keeps
    its last time), and ``timing/step``, their sum."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        tic = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[f"timing/{phase}"] = time.perf_counter() - tic

    def metrics(self) -> dict[str, float]:
        """Every phase's ``timing/<phase>`` and ``timing/step``, their sum."""
        return {**self.seconds, "timing/step": sum(self.seconds.values())}
