"""How a checkpoint's files reach the disk, and what a damaged one says.

Every file is written and fsynced before the manifest lists it with its size and
sha256 (:func:`describe_files`); the JSON files refuse values JSON cannot hold. A
damaged checkpoint's error ends with :func:`fix_hint`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ragen.checkpoint_verify import sha256_file


def to_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, indent=1, sort_keys=True)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"{what} must be JSON-serializable ({err}); convert tensors/arrays with .item() / .tolist()"
        ) from None


def describe_files(folder: Path) -> dict[str, dict]:
    """``{relative path: {"size", "sha256"}}`` of every file; also fsyncs them to disk."""
    files = {}
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = file.relative_to(folder).as_posix()
        files[rel] = {"size": file.stat().st_size, "sha256": sha256_file(file, fsync=True)}
    return files


def write_synced(file: Path, text: str) -> None:
    with open(file, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not supported on every platform/filesystem
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def summarize(items: list[str], n: int = 3) -> str:
    shown = ", ".join(items[:n])
    return shown + (f", ... {len(items) - n} more" if len(items) > n else "")


def fix_hint(folder: Path) -> str:
    return (
        f"Delete {folder} to fall back to the previous checkpoint, or resume from a specific "
        "checkpoint folder (trainer.resume=PATH)"
    )
