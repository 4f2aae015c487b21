"""What the trainer does with an echo-trap warning: ``trainer.on_collapse``.

:class:`CollapseGuard` wraps a :class:`~ragen.trainer.collapse.CollapseDetector` for one
:class:`~ragen.trainer.starpo.StarPOTrainer`:

* :meth:`observe` feeds a finished step's metrics to the detector and adds its
  ``collapse/<signal>`` diagnostics (and ``collapse/warnings``) to them, before they are
  logged;
* :meth:`act` runs after the step's metrics line: every warning becomes a console line
  and a ``collapse`` event in ``metrics.jsonl``, then the action:

  - ``warn``: nothing more;
  - ``stop``: the trainer stops after this step (the step is saved if it trained);
  - ``rollback``: restore the last checkpoint saved strictly before the warning (with
    ``trainer.rollback_to=onset``: at or before the step where the warned signal's
    moving average peaked, i.e. before its decline began)
    (weights, optimizers, schedulers, RNG, as a resume does; the later checkpoints and
    logs move to ``run_dir/superseded/<time>/``, or ``superseded/rollback<k>_step<w>/``
    when only logs are later), apply ``trainer.rollback_change``
    (logged as a ``rollback`` event with ``{key: [old, new]}``), and continue from that
    step. At most ``trainer.max_rollbacks`` times; after that a warning only warns.

With ``on_collapse=rollback`` the trainer saves a step-0 checkpoint at the start so a
warning before the first periodic checkpoint still has somewhere to go back to.
"""

from __future__ import annotations

from typing import Any

from .checkpoint import step_of
from .collapse import CollapseDetector, CollapseWarning
from .config import apply_rollback_change
from .metrics_logger import move_logs_after, read_metrics


class CollapseGuard:
    def __init__(self, trainer: Any):
        """``trainer``: the :class:`~ragen.trainer.starpo.StarPOTrainer` it acts on (not
        imported: the trainer builds its guard, so the guard cannot import it back)."""
        self.trainer = trainer
        self.detector = CollapseDetector(trainer.cfg.trainer.collapse)
        self.rollbacks = 0
        self._seen: list[tuple[int, dict[str, Any]]] = []  # (step, metrics) fed so far
        if trainer.start_step > 0:
            # a resumed run re-warms the detector on the logged steps it keeps, so its
            # peaks, diagnostics and warnings match the uninterrupted run's
            for row in read_metrics(trainer.run_dir):
                if row["step"] <= trainer.start_step:
                    self.observe(int(row["step"]), dict(row))

    def observe(self, step: int, metrics: dict[str, Any]) -> list[CollapseWarning]:
        """Feed step ``step``; add ``collapse/*`` diagnostics to ``metrics`` in place."""
        warnings = self.detector.update(step, metrics)
        self._seen.append((step, dict(metrics)))
        metrics.update(self.detector.last_metrics)
        metrics["collapse/warnings"] = float(len(warnings))
        return warnings

    def act(self, step: int, warnings: list[CollapseWarning]) -> str | int | None:
        """Log the warnings and apply ``trainer.on_collapse``. Returns ``None`` (go on),
        ``"stop"``, or the step a rollback restored (the loop continues after it)."""
        if not warnings:
            return None
        t = self.trainer.cfg.trainer
        action = t.on_collapse
        if action == "rollback" and self.rollbacks >= t.max_rollbacks:
            action = "warn"  # out of rollbacks: keep training, but say so
            note = f" (trainer.max_rollbacks={t.max_rollbacks} used up: warning only)"
        else:
            note = ""
        if action != "rollback":
            for w in warnings:
                self._event(w, action, note)
            return "stop" if action == "stop" else None
        return self._rollback(step, warnings)

    def _event(self, w: CollapseWarning, action: str, note: str = "", **extra: Any) -> None:
        logger = self.trainer.logger
        logger.print(f"step {w.step}: COLLAPSE WARNING [{w.signal}] {w.message} -> {action}{note}")
        logger.log_event(
            w.step,
            "collapse",
            signal=w.signal,
            message=w.message + note,
            action=action,
            value=w.value,
            reference=w.reference,
            onset=w.onset,
            **extra,
        )

    def _rollback(self, step: int, warnings: list[CollapseWarning]) -> int:
        tr = self.trainer
        t = tr.cfg.trainer
        # strictly before the warning; with rollback_to=onset, at or before the step the
        # earliest warned signal started to decline (its moving average's peak)
        limit = step - 1
        if t.rollback_to == "onset":
            limit = min(limit, *(w.onset for w in warnings))
        before = [p for p in tr.checkpoints.list() if step_of(p) <= limit]
        if not before:  # cannot happen with the step-0 checkpoint; never crash on it
            for w in warnings:
                self._event(w, "warn", " (no checkpoint before the warning: warning only)")
            return None  # type: ignore[return-value]
        path = before[-1]
        restored = step_of(path)
        later = any(step_of(p) > restored for p in tr.checkpoints.list())
        tr.logger.close()  # before its files move; reopened on the logs that are kept
        tr.restore(path)
        if later:
            tr.supersede_after(restored)  # later checkpoints and their logs, kept aside
        else:
            # no later checkpoint to move, but keep the abandoned steps' logs for reading
            dest = tr.run_dir / "superseded" / f"rollback{self.rollbacks + 1}_step{step}"
            move_logs_after(tr.run_dir, restored, dest)
        new_cfg, changed = apply_rollback_change(tr.cfg, list(t.rollback_change))
        self._apply(new_cfg, changed)
        tr.reopen_logger(restored)
        self.rollbacks += 1
        for w in warnings:
            self._event(w, "rollback", restored_step=restored, change=changed)
        tr.logger.print(
            f"step {step}: rolled back to {path} (step {restored}), rollback "
            f"{self.rollbacks}/{t.max_rollbacks}; changed "
            + ", ".join(f"{k}: {old} -> {new}" for k, (old, new) in changed.items())
        )
        tr.logger.log_event(
            restored,
            "rollback",
            from_step=step,
            checkpoint=str(path),
            change=changed,
            signals=[w.signal for w in warnings],
            # the rates the optimizers hold now: what the change did, read back
            lr={name: opt.param_groups[0]["lr"] for name, opt in tr.optimizers().items()},
        )
        # re-warm the detector on the steps that are kept, so peaks stay what they were
        kept = [(s, m) for s, m in self._seen if s <= restored]
        self.detector.reset()
        self._seen = []
        for s, m in kept:
            self.observe(s, m)
        return restored

    def _apply(self, new_cfg, changed: dict[str, list]) -> None:
        """Make ``changed`` take effect: the trainer reads ``cfg.algo`` and the rollout
        temperature every step; learning rates live in the optimizers and schedulers."""
        tr = self.trainer
        for key, opt_name in (("model.actor_lr", "actor"), ("model.critic_lr", "critic")):
            if key not in changed:
                continue
            old, new = changed[key]
            opt = tr.optimizers().get(opt_name)
            sched = tr.schedulers().get(opt_name)
            if opt is None:
                continue
            # Scale from the base rate the optimizer holds now, not from ``old``: the
            # checkpoint just loaded restored the rate it was saved with, which is not
            # the config's after an earlier rollback to the same checkpoint (a second
            # rollback to step 0 would otherwise give 1e-3 * 0.5, not 5e-4 * 0.5).
            bases = list(getattr(sched, "base_lrs", None) or [])
            for i, group in enumerate(opt.param_groups):
                base = bases[i] if i < len(bases) else group.get("initial_lr", group["lr"])
                factor = new / base if base else 1.0
                group["lr"] *= factor  # keeps the scheduler's multiplier (warm-up)
                if "initial_lr" in group:
                    group["initial_lr"] = new
            if sched is not None and hasattr(sched, "base_lrs"):
                sched.base_lrs = [new for _ in sched.base_lrs]
        tr.change_config(new_cfg)
