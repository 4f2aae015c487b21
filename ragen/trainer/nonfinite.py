"""How an RL run stops when an update's loss or gradient turns NaN/inf.

The update checks each micro-batch's loss and each minibatch's gradient norm before the
optimizer steps (``ragen.trainer.update.optimizer_step``, with
``ragen.models.finite.nonfinite_loss``); a non-finite one raises
:class:`NonFiniteUpdate` there, so the weights never see it. The trainer then saves the
step's data (``RUN/nonfinite/step_N/``, :func:`ragen.models.finite.save_step_data`) and
stops with one line naming the folder, the last checkpoint and the fix
(:func:`stop_error`). SFT stops the same way with its own message
(``ragen.sft.trainer``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragen.errors import NonFiniteError
from ragen.models.finite import NONFINITE_DIR, save_step_data
from ragen.run_layout import step_dir_name


class NonFiniteUpdate(NonFiniteError):
    """Raised inside an update where a loss or gradient is NaN/inf, before the optimizer
    step; the caller adds the step, saves its data and says how to go on."""


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
