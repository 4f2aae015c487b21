"""Integrity checks of model files before they are loaded, shared by the trainer and the loaders.

Two checks, both raising one-line :class:`~ragen.errors.RagenError` subclasses:

* :func:`verify_model_folder` -- a model folder inside a checkpoint written by
  ``ragen.trainer.checkpoint.CheckpointManager`` (``.../step_000123/actor``: the parent
  holds ``manifest.json``) is re-hashed against that manifest; a flipped byte is a
  :class:`~ragen.errors.CheckpointError` naming the file and an earlier checkpoint.
* every ``*.safetensors`` file of a local folder must be as long as its own header says;
  a truncated or garbled file is a :class:`~ragen.errors.ModelLoadError` naming it
  (instead of a long traceback from deep inside ``safetensors``).

This module sits at the package root, not in ``ragen.trainer``, so that ``ragen.models``
can use it without importing the trainer (and torch is not needed here).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from collections.abc import Mapping
from pathlib import Path

from ragen.errors import CheckpointError, ModelLoadError

MANIFEST = "manifest.json"
FORMAT_NAME = "ragen-checkpoint"
_STEP_DIR = re.compile(r"^step_(\d+)$")

# resolved folder -> stat fingerprint of its files when they last verified: loading a
# model resolves its folder several times (tokenizer, weights, critic); hash it once
_verified: dict[Path, tuple] = {}


def sha256_file(file: Path, fsync: bool = False) -> str:
    """Hex sha256 of ``file`` (read in 1 MiB chunks); ``fsync`` also flushes it to disk."""
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
        if fsync:
            os.fsync(f.fileno())
    return digest.hexdigest()


def file_problems(folder: Path, files: Mapping[str, Mapping], mode: str = "sha256") -> list[str]:
    """Human-readable problems of ``files`` (``{relative path: {"size", "sha256"}}``) under
    ``folder``: missing, wrong size, or (``mode="sha256"``) wrong checksum. Empty if all match."""
    problems = []
    for rel, expect in files.items():
        file = folder / rel
        if not file.is_file():
            problems.append(f"{rel} is missing")
            continue
        size = file.stat().st_size
        if size != expect["size"]:
            problems.append(f"{rel} has {size} bytes, manifest says {expect['size']}")
            continue
        if mode == "sha256":
            try:
                digest = sha256_file(file)
            except OSError as err:
                problems.append(f"{rel} is unreadable ({err})")
                continue
            if digest != expect["sha256"]:
                problems.append(f"{rel} sha256 mismatch (file changed or corrupt)")
    return problems


def checkpoint_of(model_folder: str | os.PathLike) -> Path | None:
    """The checkpoint folder (``step_XXXXXX``) that ``model_folder`` lies in, or ``None``
    when its parent holds no ``manifest.json`` (a plain HF folder)."""
    parent = Path(model_folder).resolve().parent
    return parent if (parent / MANIFEST).is_file() else None


def earlier_checkpoints(checkpoint: Path) -> list[Path]:
    """Complete sibling checkpoints older than ``checkpoint``, newest first (names only)."""
    match = _STEP_DIR.match(checkpoint.name)
    if not match or not checkpoint.parent.is_dir():
        return []
    step = int(match.group(1))
    found = []
    for child in checkpoint.parent.iterdir():
        m = _STEP_DIR.match(child.name)
        if m and int(m.group(1)) < step and (child / MANIFEST).is_file():
            found.append((int(m.group(1)), child))
    return [path for _, path in sorted(found, reverse=True)]


def verify_model_folder(folder: str | os.PathLike, mode: str = "sha256") -> None:
    """Check a local model folder before loading it; return quietly if it is fine.

    Inside a ragen checkpoint, the folder's files are checked against the manifest
    (``CheckpointError`` naming the file and the fix). In any folder, each
    ``*.safetensors`` file must match its own header (``ModelLoadError`` naming it).
    A plain HF folder without a manifest gets only the second check.
    """
    folder = Path(folder)
    checkpoint = checkpoint_of(folder)
    if checkpoint is not None:
        _verify_against_manifest(folder.resolve(), checkpoint, mode)
    for file in sorted(folder.glob("*.safetensors")):
        problem = safetensors_problem(file)
        if problem:
            raise ModelLoadError(
                f"{file} is {problem}; the file is damaged: re-save or re-download the model "
                "(or use another copy of it)"
            )


def _verify_against_manifest(folder: Path, checkpoint: Path, mode: str) -> None:
    try:
        manifest = json.loads((checkpoint / MANIFEST).read_text())
        all_files = manifest["files"]
        if manifest.get("format") != FORMAT_NAME:
            return  # somebody else's manifest.json: not ours to judge
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(
            f"checkpoint {checkpoint}: cannot read {MANIFEST} ({err}). {_earlier_hint(checkpoint)}"
        ) from None
    prefix = folder.name + "/"
    files = {rel: meta for rel, meta in all_files.items() if rel.startswith(prefix)}
    fingerprint = stat_fingerprint(checkpoint, files)
    if fingerprint is not None and _verified.get(folder) == fingerprint:
        return
    problems = file_problems(checkpoint, files, mode)
    if problems:
        shown = "; ".join(problems[:3]) + (
            f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        )
        raise CheckpointError(
            f"checkpoint {checkpoint} is corrupt: {shown}. {_earlier_hint(checkpoint, folder.name)}"
        )
    _verified[folder] = fingerprint


def stat_fingerprint(root: Path, files: Mapping) -> tuple | None:
    """Cheap (size, mtime) fingerprint of ``files`` under ``root``, to skip re-hashing an
    unchanged checkpoint; None when a file is missing."""
    try:
        stats = [(rel, (root / rel).stat()) for rel in sorted(files)]
    except OSError:
        return None
    return tuple((rel, st.st_size, st.st_mtime_ns) for rel, st in stats)


def _earlier_hint(checkpoint: Path, role: str | None = None) -> str:
    earlier = earlier_checkpoints(checkpoint)
    if not earlier:
        return "Fix: there is no earlier checkpoint in this run; retrain, or use another copy"
    target = earlier[0] / role if role else earlier[0]
    return (
        f"Fix: use an earlier checkpoint such as {target} (to continue training from it: "
        f"trainer.resume={earlier[0]})"
    )


def safetensors_problem(file: Path) -> str | None:
    """Why ``file`` is not a complete safetensors file (``"truncated: ..."``), or ``None``.

    Reads only the header: 8 bytes of little-endian header length, a JSON header whose
    ``data_offsets`` say how many data bytes must follow. Cheap on any model size.
    """
    try:
        size = file.stat().st_size
        with open(file, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return f"truncated ({size} bytes, not even a header)"
            (length,) = struct.unpack("<Q", head)
            if length > size - 8:
                return f"truncated ({size} bytes, its header alone needs {length + 8})"
            header = json.loads(f.read(length))
    except OSError as err:
        return f"unreadable ({err})"
    except (ValueError, UnicodeDecodeError):
        return "not a valid safetensors file (its header is not JSON)"
    if not isinstance(header, dict):
        return "not a valid safetensors file (its header is not a JSON object)"
    try:
        ends = [
            int(meta["data_offsets"][1])
            for name, meta in header.items()
            if name != "__metadata__" and isinstance(meta, dict) and "data_offsets" in meta
        ]
    except (TypeError, ValueError, IndexError):
        return "not a valid safetensors file (bad data_offsets in its header)"
    needed = 8 + length + max(ends, default=0)
    if size < needed:
        return f"truncated ({size} bytes, its header says {needed})"
    return None
