"""The trainer's side of checkpoints: resume a run, set later checkpoints aside, save a step.

Functions of what they read (the config, the run's :class:`~.checkpoint.CheckpointManager`,
the models), so the loop in ``starpo.py`` says only *when* (``docs/CHECKPOINTS.md`` says
what a checkpoint holds).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragen.errors import CheckpointError
from ragen.run_layout import step_of

from .config import to_dict
from .metrics_logger import move_logs_after

if TYPE_CHECKING:
    from .checkpoint import CheckpointManager
    from .config import TrainConfig
    from .dynamic_sampling import Curriculum
    from .models import TrainModels


def resume(
    cfg: TrainConfig,
    checkpoints: CheckpointManager,
    models: TrainModels,
    curriculum: Curriculum | None,
) -> tuple[int, Path | None]:
    """``(step, checkpoint)`` the run continues from (``trainer.resume``), its state loaded
    into ``models`` (and the level ``curriculum`` had reached); ``(0, None)`` for a fresh
    start. Refuses a folder that holds checkpoints with ``resume=never``, and a checkpoint
    trained with another ``trainer.seed``."""
    run_dir, resume_from = checkpoints.run_dir, cfg.trainer.resume
    if resume_from == "never":
        if checkpoints.list():
            raise CheckpointError(
                f"{run_dir} already holds checkpoints; refusing to overwrite them. "
                "Fix: add trainer.resume=auto to continue, or choose another trainer.run_name"
            )
        return 0, None
    path = checkpoints.latest() if resume_from == "auto" else Path(resume_from)
    if path is None:
        return 0, None
    state = checkpoints.load(
        path,
        actor=models.actor,
        critic=models.critic,
        optimizers=models.optimizers(),
        schedulers=models.schedulers(),
        config=to_dict(cfg),
    )
    saved_seed = state.get("seed", cfg.trainer.seed)
    if saved_seed != cfg.trainer.seed:
        # the training seeds of every step derive from trainer.seed: another seed
        # would silently replay or skip initial states
        raise CheckpointError(
            f"{path} was trained with trainer.seed={saved_seed}, not "
            f"{cfg.trainer.seed}. Fix: resume with trainer.seed={saved_seed}"
        )
    if curriculum is not None:  # the level it had reached
        curriculum.restore(state.get("curriculum"))
    return int(state["step"]), path


def supersede_after(checkpoints: CheckpointManager, step: int) -> None:
    """Resuming from a checkpoint that is not the run's latest: move the later
    checkpoints and the logs of later steps into ``run_dir/superseded/<time>/`` (kept,
    never deleted), so the run continues from ``step`` with every step logged once."""
    run_dir = checkpoints.run_dir
    later = [p for p in checkpoints.list() if step_of(p) > step]
    if not later:
        return  # a plain resume: the logger drops the lines of the steps it redoes
    dest = run_dir / "superseded" / time.strftime("%Y%m%d-%H%M%S")
    n = 1
    while dest.exists():
        n += 1
        dest = dest.with_name(f"{dest.name.split('.')[0]}.{n}")
    moved = checkpoints.move_after(step, dest / "checkpoints")
    logs = move_logs_after(run_dir, step, dest)
    names = ", ".join(p.name for p in moved)
    print(
        f"resuming from step {step}, before the run's latest checkpoint: moved the later "
        f"checkpoints ({names}){' and their logs' if logs else ''} aside to {dest} "
        "(kept; delete it once you no longer need it)"
    )


def save(
    checkpoints: CheckpointManager,
    step: int,
    phases: Any,
    models: TrainModels,
    cfg: TrainConfig,
    curriculum: Curriculum | None,
) -> Path:
    """Write step ``step``'s checkpoint: the whole state as ``phases`` (the trainer, or
    the rank group: ``ModelPhases.whole_state``) holds it, plus the step, seed and
    curriculum level a resume needs."""
    with phases.whole_state() as (actor, critic, optimizers):
        return checkpoints.save(
            step,
            actor=actor,
            tokenizer=models.tokenizer,
            critic=critic,
            optimizers=optimizers,
            schedulers=models.schedulers(),
            trainer_state={
                "step": step,
                "seed": cfg.trainer.seed,
                **({"curriculum": curriculum.state()} if curriculum else {}),
            },
            config=to_dict(cfg),
            overwrite=False,
        )
