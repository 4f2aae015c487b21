"""A training run's folder: the names inside it that more than one part of ragen reads,
and the lock that keeps it to one training.

    RUN/checkpoints/step_000050/   a checkpoint (actor/, critic/, train_config.json, ...)
    RUN/checkpoints/step_000050.tmp/   a save that was interrupted (never loaded)
    RUN/.lock   who holds the folder (pid, host, start time, command)

The trainer writes them (``ragen.trainer.checkpoint``); ``ragen eval`` and the two-player
envs' frozen opponents find a run's newest checkpoint from them
(``ragen.agent.evaluate.find_training_run``). Stdlib only (and ``ragen.errors``), so any
layer may read a run folder without importing the trainer. :func:`json_line` reads one
line of a run's JSON lines files (``metrics.jsonl``, trajectories) for the trainer's
resume and ``ragen view`` alike.

**One training per run folder.** Two trainings writing one folder lose data silently: the
second rewrites ``config.yaml`` and ``metrics.jsonl`` while the first goes on and exits 0.
So a training holds an exclusive ``flock`` on ``RUN/.lock`` (:class:`RunLock`) from its
start to its end, and a second one is refused with one line naming the holder, which the
holder writes into the file. Stale locks cannot happen: the kernel drops a ``flock`` when
its process ends, however it ends (``kill -9`` included), so a folder left by a dead
training is free again; its ``.lock`` file stays, describing the last holder, and is
reused. On a system without ``fcntl`` (Windows) no lock is taken.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shlex
import socket
import sys
import time
from pathlib import Path
from typing import IO, Any

from ragen.errors import RunDirError

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CHECKPOINTS",
    "TRAIN_CONFIG",
    "STEP_DIR",
    "TMP_DIR",
    "step_dir_name",
    "step_of",
    "checkpoint_dirs",
    "json_line",
    "LOCK_FILE",
    "RunLock",
    "unwritable_error",
]

CHECKPOINTS = "checkpoints"  # the run folder's checkpoint folder
TRAIN_CONFIG = "train_config.json"  # the resolved config, in every checkpoint
STEP_DIR = re.compile(r"^step_(\d+)$")
TMP_DIR = re.compile(r"^step_(\d+)\.tmp$")
LOCK_FILE = ".lock"  # who holds the folder: RunLock


def step_dir_name(step: int) -> str:
    """``123 -> "step_000123"`` (six digits keep ``ls`` order equal to step order)."""
    return f"step_{step:06d}"


def step_of(path: str | Path) -> int:
    """Step number encoded in a checkpoint folder name (``.../step_000123 -> 123``)."""
    match = STEP_DIR.match(Path(path).name)
    if not match:
        raise ValueError(f"{path} is not a checkpoint folder (expected a name like step_000123)")
    return int(match.group(1))


def checkpoint_dirs(root: str | Path) -> list[Path]:
    """The checkpoint folders (``step_XXXXXX``) directly under ``root`` (a run's
    ``checkpoints/`` folder), oldest first; names only, not verified, ``.tmp`` ignored."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [c for c in root.iterdir() if c.is_dir() and STEP_DIR.match(c.name)]
    return sorted(found, key=step_of)


def _number(digits: str) -> int | float:
    """A JSON integer: an ``int`` while a float can hold it, else +-inf. Python refuses
    ``int()`` of more than 4,300 digits (``sys.get_int_max_str_digits``) with a
    ValueError, which made one such number in ``metrics.jsonl`` crash ``ragen view`` and
    ``trainer.resume=auto``; and ``float()`` of an int past 1.8e308 raises OverflowError
    wherever a metric is averaged or drawn. No metric or step is that large, so such a
    number reads as the overflow it is."""
    limit = sys.get_int_max_str_digits() or math.inf  # 0: no limit
    if len(digits.lstrip("-")) <= limit:
        value = int(digits)
        if abs(value) <= sys.float_info.max:
            return value
    return -math.inf if digits.startswith("-") else math.inf


def json_line(text: str | bytes) -> Any:
    """``json.loads(text)``, but integers beyond the float range come back as +-inf
    (:func:`_number`) instead of raising; bad JSON still raises ``json.JSONDecodeError``."""
    return json.loads(text, parse_int=_number)


# -- one training per run folder --------------------------------------------------------
def unwritable_error(run_dir: Path, err: OSError) -> RunDirError:
    """The one-line error for a run folder that cannot be created or written."""
    reason = err.strerror or str(err)
    return RunDirError(
        f"trainer.run_dir: cannot write to {run_dir} ({reason}). Fix: choose a writable "
        "folder, e.g. trainer.run_dir=$HOME/runs/NAME"
    )


class RunLock:
    """The exclusive lock of one run folder; :meth:`acquire` it, :meth:`release` it."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._file: IO[str] | None = None  # open while held (closing it drops the lock)

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> RunLock:
        """Create the folder if needed and lock it. Raises :class:`RunDirError` when the
        folder is not writable or another training holds it."""
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            file = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held open
        except OSError as err:
            raise unwritable_error(self.run_dir, err) from None
        if fcntl is not None:
            try:
                fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    file.close()
                    raise unwritable_error(self.run_dir, err) from None
                holder = describe_holder(self.path)
                file.close()
                raise RunDirError(
                    f"trainer.run_dir {self.run_dir} is in use by another training "
                    f"({holder}). Fix: wait for it to end or stop it, or choose another "
                    "trainer.run_dir (or trainer.run_name)"
                ) from None
        try:
            file.seek(0)
            file.truncate()
            file.write(json.dumps(holder_info()) + "\n")
            file.flush()
        except OSError as err:
            file.close()
            raise unwritable_error(self.run_dir, err) from None
        self._file = file
        return self

    def release(self) -> None:
        """Drop the lock (closing the file drops the flock); a no-op when not held."""
        if self._file is not None:
            self._file.close()
            self._file = None


def holder_info() -> dict[str, Any]:
    """What a training writes into its lock file: who holds the folder."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": shlex.join(["ragen", *sys.argv[1:]])
        if Path(sys.argv[0]).name in ("ragen", "cli.py", "__main__.py")
        else shlex.join(sys.argv),
    }


def describe_holder(path: Path) -> str:
    """``"pid 123 on host, since 2025-01-01 12:00:00: ragen train ..."`` from a lock file."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        return f"pid {info['pid']} on {info['host']}, since {info['started']}: {info['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return f"see {path}"  # the holder is between opening the file and writing it
