"""NaN and inf: refuse weights that hold them, and losses before they reach a gradient.

A model whose weights went non-finite (an inf learning rate, a NaN loss that reached the
optimizer) still runs: its logits are NaN, sampling falls back to arbitrary ids, and an
evaluation prints a normal-looking table. So the weights are checked where they cross a
boundary: before a checkpoint or an SFT model is saved, and after any model is loaded
(``ragen.models.loading.load_policy``, the trainer's resume). The check reads every
tensor once (``torch.isfinite``): well under a second for a 0.5B model on CPU.

Both trainers (RL: ``ragen.trainer.update``; SFT: ``ragen.sft.trainer``) check each
micro-batch's loss before its backward (:func:`nonfinite_loss`) and, when one is NaN or
inf, stop before the optimizer step and leave the step's data for inspection, as plain
tensors anyone can read (:func:`save_step_data`)::

    RUN/nonfinite/step_000007/batch.pt      {field: tensor} of the step's TrainingBatch
                                            (torch.load(..., weights_only=True) reads it)
    RUN/nonfinite/step_000007/report.json   what went non-finite, where, the settings
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from ragen.errors import NonFiniteError

#: the folder of a run (or an SFT output) that holds the data of a step that went NaN/inf
NONFINITE_DIR = "nonfinite"


def nonfinite_tensors(named: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """Names of the floating-point tensors in ``named`` that hold a NaN or an inf."""
    bad = []
    for name, tensor in named:
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad.append(name)
    return bad


def model_tensors(model: torch.nn.Module) -> Iterable[tuple[str, torch.Tensor]]:
    """Parameters and buffers of ``model`` (tied weights once)."""
    seen: set[int] = set()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            yield name, tensor.detach()


def check_finite_weights(model: torch.nn.Module, where: str, fix: str) -> None:
    """Raise :class:`NonFiniteError` naming ``where``, the count and the first tensors when
    any weight of ``model`` is NaN or inf; ``fix`` says what to do instead."""
    tensors = list(model_tensors(model))
    bad = nonfinite_tensors(tensors)
    if bad:
        shown = ", ".join(bad[:3]) + (f", ... {len(bad) - 3} more" if len(bad) > 3 else "")
        raise NonFiniteError(
            f"{where}: {len(bad)} of {len(tensors)} weight tensors hold NaN or inf ({shown}). "
            f"Fix: {fix}"
        )


def nonfinite_loss(loss: torch.Tensor, what: str, model: torch.nn.Module) -> str:
    """``""`` when ``loss`` is finite, else what went wrong (``"the actor loss is nan"``).

    A non-finite loss is not back-propagated: the caller skips its backward, and the
    model's gradient is set to NaN here instead, so the optimizer step stops on every
    rank of a data-parallel update alike (gradients are summed over ranks before their
    norm is taken), not only on the rank that saw the bad loss."""
    value = float(loss.detach())
    if math.isfinite(value):
        return ""
    first = next(p for p in model.parameters() if p.requires_grad)
    first.grad = torch.full_like(first, float("nan"))
    return f"the {what} is {value}"


def save_step_data(folder: Path, tensors: dict[str, Any], report: dict[str, Any]) -> Path:
    """Write ``tensors`` (None values skipped) as ``batch.pt`` and ``report`` as
    ``report.json`` into ``folder``; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    kept = {k: v.detach().cpu() for k, v in tensors.items() if isinstance(v, torch.Tensor)}
    torch.save(kept, folder / "batch.pt")
    (folder / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    return folder
