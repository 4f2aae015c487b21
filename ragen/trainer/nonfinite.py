"""What a training step leaves behind when its loss or gradient turns NaN/inf.

The update checks each micro-batch's loss and each minibatch's gradient norm before the
optimizer steps (``ragen.trainer.update.optimizer_step``, ``ragen.sft.trainer.train_sft``); a
non-finite one raises :class:`NonFiniteUpdate` there, so the weights never see it. The
step's data is then saved for inspection, as plain tensors anyone can read::

    RUN/nonfinite/step_000007/batch.pt      {field: tensor} of the step's TrainingBatch
                                            (torch.load(..., weights_only=True) reads it)
    RUN/nonfinite/step_000007/report.json   what went non-finite, where, the settings

and the run stops with one line naming the folder, the last checkpoint and the fix.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from ragen.errors import NonFiniteError

NONFINITE_DIR = "nonfinite"


class NonFiniteUpdate(NonFiniteError):
    """Raised inside an update where a loss or gradient is NaN/inf, before the optimizer
    step; the caller adds the step, saves its data and says how to go on."""


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


def stop_error(
    cfg: Any,
    run_dir: Path,
    step: int,
    tensors: dict[str, Any],
    what: str,
    metrics: dict[str, float],
    last_checkpoint: Path | None,
    resume_hint: str,
) -> NonFiniteError:
    """Save step ``step + 1``'s batch (``tensors``: its fields) for inspection; the
    one-line error that stops the run. ``cfg``: the run's ``TrainConfig``."""
    from ragen.run_layout import step_dir_name

    m, a = cfg.model, cfg.algo
    folder = run_dir / NONFINITE_DIR / step_dir_name(step + 1)
    report = {
        "step": step + 1,
        "what": what,
        "settings": {
            "model.actor_lr": m.actor_lr,
            "model.critic_lr": m.critic_lr,
            "algo.grad_clip": a.grad_clip,
            "algo.adv_estimator": a.adv_estimator,
        },
        "metrics": metrics,
    }
    save_step_data(folder, tensors, report)
    kept = (
        f"the last checkpoint is {last_checkpoint}"
        if last_checkpoint is not None
        else "no checkpoint was saved yet"
    )
    return NonFiniteError(
        f"step {step + 1}: {what}, so the run stops before that optimizer step; the "
        f"step's batch is saved in {folder} for "
        f"inspection; {kept}. Fix: lower model.actor_lr (now {m.actor_lr:g}) or "
        f"model.critic_lr (now {m.critic_lr:g}), or look for inf/NaN rewards in "
        f"{folder}/batch.pt. {resume_hint}"
    )
