"""The names inside a training run's folder that more than one part of ragen reads.

    RUN/checkpoints/step_000050/   a checkpoint (actor/, critic/, train_config.json, ...)
    RUN/checkpoints/step_000050.tmp/   a save that was interrupted (never loaded)

The trainer writes them (``ragen.trainer.checkpoint``); ``ragen eval`` and the two-player
envs' frozen opponents find a run's newest checkpoint from them
(``ragen.agent.evaluate.find_training_run``). Stdlib only, so any layer may read a run
folder without importing the trainer.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = [
    "CHECKPOINTS",
    "TRAIN_CONFIG",
    "STEP_DIR",
    "TMP_DIR",
    "step_dir_name",
    "step_of",
    "checkpoint_dirs",
]

CHECKPOINTS = "checkpoints"  # the run folder's checkpoint folder
TRAIN_CONFIG = "train_config.json"  # the resolved config, in every checkpoint
STEP_DIR = re.compile(r"^step_(\d+)$")
TMP_DIR = re.compile(r"^step_(\d+)\.tmp$")


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
