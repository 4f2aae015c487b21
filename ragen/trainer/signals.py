"""Ctrl-C and SIGTERM during training: stop at a safe point, never mid-save.

A training step has two halves. The rollout and batch preparation change nothing (the
weights, optimizers and logs are as the last step left them), so a signal there
abandons the step at once (:class:`StepAbandoned`). Once the update has begun, the
step changes weights and must finish; the signal is remembered and the loop stops after
it. A checkpoint save is never interrupted: a signal during it waits for the save. A
third signal outside a save stops at once, without saving.

The trainer marks the halves (``abandonable``), wraps saves in :meth:`saving`, and
after the loop raises :class:`TrainingInterrupted` with what was saved and the command
that resumes; ``ragen train`` exits with its ``exit_code``.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class TrainingInterrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM stopped training after the last completed step was saved.

    ``signum`` is the signal, ``exit_code`` the conventional status (130 for SIGINT, 143
    for SIGTERM), and the message says what was saved and the command that resumes.
    """

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


class StepAbandoned(BaseException):
    """Raised by the handler inside the abandonable half of a step (before the update
    changes any state). A BaseException so no ``except Exception`` swallows it."""


class StopSignals:
    """The stop requests of one training run (see the module docstring).

    ``signum``: the first signal received (None: keep going). ``abandonable``: set by
    the trainer while the step in progress has changed nothing yet.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.abandonable = False
        self._saving = False
        self._seen = 0

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Handle SIGINT/SIGTERM inside the block (main thread only; restored after)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in previous:
            signal.signal(sig, self._on_signal)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @contextmanager
    def saving(self) -> Iterator[None]:
        """A checkpoint save: signals arriving meanwhile wait until it is complete."""
        self._saving = True
        try:
            yield
        finally:
            self._saving = False

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._seen += 1
        if self.signum is None:
            self.signum = signum
        name = signal.Signals(signum).name
        if self._saving:
            print(f"{name}: saving a checkpoint; stopping once it is written", file=sys.stderr)
            return
        if self.abandonable:
            self.abandonable = False
            raise StepAbandoned
        if self._seen >= 3:
            raise KeyboardInterrupt
        print(
            f"{name}: stopping after the current step (its update has begun) and saving; "
            "send it twice more to stop at once without saving",
            file=sys.stderr,
            flush=True,
        )
