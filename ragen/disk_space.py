"""Disk space: how many bytes a save needs, whether a failed write means a full disk, and
a check before a long job that it can write its result at all.

A model's weights, and the optimizer state beside them in a checkpoint, are large
(SmolLM2-135M in float32: 540 MB of weights, 1.1 GB of Adam moments). A job that trains
for an hour and then finds no room to save has lost that hour, and the writers say so
badly (safetensors: "I/O error: ... (os error 28)", torch: "basic_ios::clear: iostream
error"). So the savers ask :func:`require_free` before the work starts, and turn a
failed write into one :class:`~ragen.errors.DiskFullError` line with
:func:`is_disk_full`.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import torch

from ragen.errors import DiskFullError

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# what writers that hide the errno say: torch.save ("basic_ios::clear: iostream error",
# "PytorchStreamWriter failed writing file"), safetensors/Rust ("os error 28")
_WRITE_FAILED = ("no space left", "os error 28", "iostream error", "failed writing", "write failed")

SMALL_FILES = 1 << 20  # tokenizer, config, RNG states, JSON: about a megabyte in all


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the disk that holds ``path`` (or the nearest existing folder above
    it); None when the system cannot tell."""
    folder = Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def state_bytes(model: torch.nn.Module) -> int:
    """Bytes the model's state dict takes when saved (each tensor's numel x element size;
    tied weights counted once, as safetensors stores them)."""
    seen: set[int] = set()
    total = 0
    for t in model.state_dict().values():
        if t.data_ptr() in seen and t.data_ptr() != 0:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    return total


def adam_state_bytes(model: torch.nn.Module) -> int:
    """Bytes of Adam's two float32 moments for the trainable parameters (what a
    checkpoint's ``optim.pt`` holds once the first update has run)."""
    return sum(2 * p.numel() * 4 for p in model.parameters() if p.requires_grad)


def mb(n: int) -> str:
    """``n`` bytes as megabytes for a message: ``"1,080 MB"``, ``"0.01 MB"``."""
    return f"{n / 1e6:,.0f} MB" if n >= 1e6 else f"{n / 1e6:.2f} MB"


def is_disk_full(err: BaseException, root: str | Path, needed: int) -> bool:
    """Whether ``err`` (or an error it came from) means the disk under ``root`` is full:
    ENOSPC/EDQUOT anywhere in its chain, or a write failure whose writer hides the errno
    while less than ``needed`` bytes are free."""
    seen: set[int] = set()
    node: BaseException | None = err
    write_failed = False
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        if isinstance(node, OSError) and node.errno in NO_SPACE:
            return True
        write_failed |= any(s in str(node).lower() for s in _WRITE_FAILED)
        node = node.__cause__ or node.__context__
    if not write_failed:
        return False
    free = free_bytes(root)
    return free is not None and free < needed


def require_free(path: str | Path, needed: int, what: str, fix: str) -> None:
    """Raise :class:`DiskFullError` now, before any work, when the disk under ``path`` has
    less than ``needed`` bytes free for ``what`` (e.g. "the SFT model"); ``fix`` ends the
    message. Does nothing when the free space cannot be read."""
    free = free_bytes(path)
    if free is not None and free < needed:
        raise DiskFullError(
            f"not enough disk space for {what} in {path}: needs ~{mb(needed)}, "
            f"{mb(free)} free; stopped before any work. Fix: {fix}"
        )
