"""Progress lines for the phases that can run long: a rollout's turns, the engine's decode
steps, scoring, the update's micro-batches, evaluation.

A real model on a CPU can spend minutes in one phase (SmolLM2's rollout of 8 episodes:
~2 minutes), and a console that stays silent that long looks hung. A phase opens a
:class:`Progress` with the number of units it will do and advances it as it goes; a line
is printed on stderr only once the phase has run ``after`` seconds, and then at most one
line every ``every`` seconds across all phases (nested phases share that clock), so
the tiny models' sub-second phases print nothing::

    [progress] step 3/20 rollout: turn 2/5 · 45 s, about 1 min 10 s left
    [progress] step 3/20 update: micro-batch 6/16 · 31 s, about 52 s left

Time left is linear in the units: ``elapsed * (total - done) / done`` (a rollout's later
turns have fewer live episodes, so there it is an upper bound). ``RAGEN_PROGRESS=0``
turns every line off; :func:`labelled` prefixes the lines (the trainer's step).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import TextIO

AFTER_S = 5.0  # a phase prints nothing before it has run this long
EVERY_S = 10.0  # and then at most one line this often, across nested phases
_state = {"label": "", "last_print": 0.0}


def enabled() -> bool:
    """Whether progress lines are printed (``RAGEN_PROGRESS=0`` turns them off)."""
    return os.environ.get("RAGEN_PROGRESS", "1") != "0"


@contextlib.contextmanager
def labelled(label: str) -> Iterator[None]:
    """Prefix every progress line printed inside with ``label`` (e.g. ``step 3/20``)."""
    before = _state["label"]
    _state["label"] = label
    try:
        yield
    finally:
        _state["label"] = before


def duration(seconds: float) -> str:
    """``7 s``, ``2 min 05 s``, ``1 h 03 min``: a wait a person reads at a glance."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    """One phase's progress: ``total`` units of ``unit`` (``turn``, ``token``, ...).

    ``advance(n)`` after each unit; ``close()`` (or the ``with`` block's end) when done.
    Printing is throttled (module docstring), so calling ``advance`` per decode step
    costs a clock read."""

    def __init__(
        self,
        phase: str,
        total: int,
        unit: str,
        after: float | None = None,
        every: float | None = None,
        stream: TextIO | None = None,
    ):
        self.phase, self.total, self.unit = phase, max(int(total), 1), unit
        # None: the module's AFTER_S / EVERY_S as they are now (tests set them to 0)
        self.after = AFTER_S if after is None else after
        self.every = EVERY_S if every is None else every
        self.stream = stream
        self.done = 0
        self.started = time.perf_counter()
        self.printed = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def advance(self, n: int = 1) -> None:
        """``n`` more units done; maybe print a line."""
        self.done = min(self.done + n, self.total)
        now = time.perf_counter()
        elapsed = now - self.started
        if elapsed < self.after or now - _state["last_print"] < self.every or not enabled():
            return
        left = elapsed * (self.total - self.done) / max(self.done, 1)
        self._print(
            f"{self.unit} {self.done}/{self.total} · {duration(elapsed)}, "
            f"about {duration(left)} left"
        )

    def close(self) -> None:
        """Say the phase ended, when it printed a line before (else nothing)."""
        if self.printed and enabled():
            self._print(f"done in {duration(time.perf_counter() - self.started)}")
            self.printed = False

    def _print(self, text: str) -> None:
        label = f"{_state['label']} " if _state["label"] else ""
        stream = self.stream or sys.stderr
        print(f"[progress] {label}{self.phase}: {text}", file=stream, flush=True)
        _state["last_print"] = time.perf_counter()
        self.printed = True
