"""The run's saved state, as the trainer keeps it: checkpoints saved and restored, the
settings a rollback changes, and the errors that stop a run with the command that
resumes it. A part of :class:`~ragen.trainer.starpo.StarPOTrainer` (its base class),
apart so that the loop and its phases read alone.

What acts on a run from outside the loop uses the public methods here: the collapse
guard (``restore``, ``supersede_after``, ``reopen_logger``, ``change_config``,
``optimizers``, ``schedulers``) and the data-parallel tests (``optimizers``).
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

from ragen.batching import TrainingBatch
from ragen.disk_space import SMALL_FILES, adam_state_bytes, require_free, state_bytes
from ragen.errors import ConfigError, DiskFullError

from . import rollout_phase, run_checkpoints
from .checkpoint import step_of
from .config import TrainConfig, to_dict, to_yaml
from .metrics_logger import MetricsLogger
from .nonfinite import stop_error


class RunState:
    """Checkpoints, rollback hooks and stop errors of a :class:`StarPOTrainer` (which
    sets ``cfg``, ``models``, ``checkpoints``, ``logger``, ``run_dir``, ``signals``)."""

    # set by StarPOTrainer
    cfg: TrainConfig
    _saved_step: int = 0  # the newest checkpoint of these weights (0: none)
    _trained_since_save: bool = False

    # -- what acts on the run from outside the loop (the collapse guard, a rank's test) --
    def optimizers(self) -> dict[str, Any]:
        """``{"actor": AdamW, "critic": AdamW}`` (no critic: the actor's alone)."""
        return self.models.optimizers()

    def schedulers(self) -> dict[str, Any]:
        """The learning-rate schedulers, keyed as :meth:`optimizers`."""
        return self.models.schedulers()

    def supersede_after(self, step: int) -> None:
        """Move this run's checkpoints (and their logs) after ``step`` aside, kept."""
        run_checkpoints.supersede_after(self.checkpoints, step)

    def restore(self, path: Path) -> int:
        """Load this run's checkpoint ``path`` into the models, optimizers and schedulers;
        the run then counts as saved at its step, which is returned.

        No config comparison: the run's own checkpoint (an earlier rollback may have
        changed the learning rate it was saved with). Sharded ranks
        (``trainer.train_sharding=fsdp``) take the loaded state back (``whole_state``)."""
        with self.phases().whole_state(load=True) as (actor, critic, optimizers):
            self.checkpoints.load(
                path,
                actor=actor,
                critic=critic,
                optimizers=optimizers,
                schedulers=self.schedulers(),
            )
        step = step_of(path)
        self._saved_step = step
        self._trained_since_save = False
        return step

    def _open_logger(self, start_step: int):
        """The metric logs (console, JSONL, TensorBoard, W&B), from ``start_step`` on."""
        t = self.cfg.trainer
        wandb = (
            {"project": t.wandb_project, "mode": t.wandb_mode, "name": self.run_name}
            if t.wandb
            else None
        )
        return MetricsLogger(
            self.run_dir,
            t.total_steps,
            console=t.console,
            tensorboard=t.tensorboard,
            wandb=wandb,
            config=to_dict(self.cfg),
            start_step=start_step,
        )

    def reopen_logger(self, step: int) -> None:
        """Close the metric logs and open them again at ``step`` (after a restore, once
        the later steps' logs are moved aside): later rows continue from there."""
        self.logger.close()
        self.logger = self._open_logger(step)

    def change_config(self, cfg: TrainConfig) -> None:
        """Train on with ``cfg`` from the next step (it must differ only in keys a
        rollback may change, ``ragen.trainer.config.rollback``): ``cfg.algo`` and the
        rollout temperature are read every step; learning rates live in the optimizers
        and schedulers, which the caller sets. The run folder's config.yaml follows."""
        self.cfg = cfg
        self.rollout_cfg = cfg.rollout
        (self.run_dir / "config.yaml").write_text(to_yaml(cfg))

    # -- saving the run, and the errors that stop it -----------------------------------
    def _save_if_trained(self, step: int) -> None:
        """Save ``step`` unless no step since the last checkpoint (or the start) trained
        anything: such a checkpoint would hold the same weights under a later step."""
        if not self._trained_since_save:
            since = f"step {self._saved_step}" if self._saved_step else "the start"
            self.logger.print(
                f"step {step}: no checkpoint written: no step since {since} trained anything"
            )
            return
        self.save_checkpoint(step)

    def _save_on_stop(self, done: int) -> str:
        """After a signal: save the last completed step if needed; say what is on disk."""
        name = self.signals.name
        if done > self._saved_step and self._trained_since_save:
            path = self.save_checkpoint(done)
            return f"{name}: stopped after step {done}; saved {path}."
        if self._saved_step:
            return (
                f"{name}: stopped after step {done}; checkpoint "
                f"{self.checkpoints.path_for(self._saved_step)} holds its weights."
            )
        return f"{name}: stopped after step {done}; no step trained anything, nothing to save."

    def _stopped_by_error(self, err: Exception, done: int) -> Exception:
        """``err`` (a one-line user error that ends the run after step ``done``) with what
        is on disk and the command that resumes: the steps trained since the last
        checkpoint are saved first, never dropped."""
        if self._trained_since_save and done > self._saved_step:
            try:
                note = f"Saved step {done} to {self.save_checkpoint(done)}."
            except DiskFullError as failed:
                return failed  # its message says what is intact and how to resume
        elif self._saved_step:
            note = f"Checkpoint {self.checkpoints.path_for(self._saved_step)} holds the weights."
        else:
            return err  # nothing trained: nothing to resume
        return type(err)(f"{str(err).rstrip('.')}. {note} {self.resume_hint()}")

    def resume_hint(self) -> str:
        """The exact command that continues this run from its newest checkpoint."""
        if self.argv is None:
            return "To resume, rerun the same command with trainer.resume=auto."
        args = [a for a in self.argv if not a.startswith("trainer.resume=")]
        command = shlex.join(["ragen", "train", *args, "trainer.resume=auto"])
        return f"To resume: {command}"

    def _stalled_error(self, skipped: int, metrics: dict[str, float]) -> ConfigError:
        """The one-line error after ``skipped`` consecutive steps that trained nothing."""
        return rollout_phase.stalled_error(self.cfg, skipped, metrics, self._skip_reason)

    def _nonfinite_error(self, step: int, batch: TrainingBatch, what: str, metrics) -> Exception:
        """Save step ``step + 1``'s batch for inspection; the one-line error that stops the
        run (``ragen.trainer.nonfinite``)."""
        saved = getattr(self, "_saved_step", 0)
        last = self.checkpoints.path_for(saved) if saved else None
        tensors = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
        return stop_error(
            self.cfg, self.run_dir, step, tensors, what, metrics, last, self.resume_hint()
        )

    def _require_room_for_a_checkpoint(self) -> None:
        """Stop with :class:`~ragen.errors.DiskFullError` when the run folder's disk cannot
        hold one checkpoint: the weights of every trained model plus Adam's two float32
        moments per trainable parameter (``ragen.disk_space``)."""
        needed = SMALL_FILES
        for model in (self.models.actor, self.models.critic):
            if model is not None:
                needed += state_bytes(model) + adam_state_bytes(model)
        every = self.cfg.trainer.save_every
        require_free(
            self.checkpoints.root,
            needed,
            f"one checkpoint (trainer.save_every={every}"
            + ("; 0 still saves the last step" if not every else "")
            + ")",
            "free space on that disk, or point trainer.run_dir at a disk with room",
        )

    def save_checkpoint(self, step: int) -> Path:
        """Save ``step``; signals arriving meanwhile wait until the checkpoint is complete."""
        with self.signals.saving():
            try:
                path = self._write_checkpoint(step)
            except DiskFullError as err:  # the message gains the command that resumes
                raise DiskFullError(f"{err}. {self.resume_hint()}") from None
        self._saved_step = step
        self._trained_since_save = False
        return path

    def _write_checkpoint(self, step: int) -> Path:
        return run_checkpoints.save(
            self.checkpoints, step, self.phases(), self.models, self.cfg, self.curriculum
        )
