"""The names inside a training run's folder that more than one part of ragen reads.

    RUN/checkpoints/step_000050/   a checkpoint (actor/, critic/, train_config.json, ...)
    RUN/checkpoints/step_000050.tmp/   a save that was interrupted (never loaded)

The trainer writes them (``ragen.trainer.checkpoint``); ``ragen eval`` and the two-player
envs' frozen opponents find a run's newest checkpoint from them
(``ragen.agent.evaluate.find_training_run``). Stdlib only, so any layer may read a run
folder without importing the trainer. :func:`json_line` reads one line of a run's JSON
lines files (``metrics.jsonl``, trajectories) for the trainer's resume and ``ragen view``
alike.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "CHECKPOINTS",
    "TRAIN_CONFIG",
    "STEP_DIR",
    "TMP_DIR",
    "step_dir_name",
    "step_of",
    "checkpoint_dirs",
    "json_line",
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
