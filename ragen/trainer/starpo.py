"""The StarPO training loop (RAGEN), with StarPO-S and TRICO as configurations of it.

One step, top to bottom (docs/ARCHITECTURE.md draws it as data), each phase a module::

    rollout_phase.collect       the step's episodes (training seeds, env_groups x group_size)
    rollout_phase.filter_trainable / prepare_batch
                                StarPO-S group filter on RAW scores, normalization, rewards
    scoring.score_batch         old (and reference) log-probs, the critic's values
    advantages.advantage_phase  the registered estimator, whitening, masks, floor
    update.ppo_update           ppo_epochs x minibatches, micro-batched by a token budget
    -> metrics -> periodic validation -> collapse detector (warn | stop | rollback,
       ragen.trainer.collapse_guard) -> checkpoint

The model phases (scoring, the update, reasoning stats, the whole state) run here or on
data-parallel ranks: ``phases()`` is this trainer or the rank group, behind one protocol
(``ragen.trainer.phase_context.ModelPhases``); both call the same phase functions, the ranks with their own
sync hook (``ragen.trainer.phase_context.RankSync``). Rollout workers and training ranks
come from the ``scale_out`` a caller passes (``ragen.distributed.ScaleOut``, attached by
``ragen train``); the trainer never imports the distributed code.

Before the filter, up to ``trainer.reasoning_samples`` samples' thoughts are cross-scored
under every distinct prompt of the step (``reasoning/mutual_info``, ``..._token``, ...).

Why this file is over 500 lines: it is the loop (``train``, ``train_step``) and the run's
life around it (construction, resume, signals, skipped steps, non-finite stops, rollback,
checkpoints), all of it state of one run; the phases hold the math and are short. About
a third is the thin ``ModelPhases`` methods and delegating properties that keep the
public names tests and benchmarks use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ragen import progress
from ragen.agent.env_manager import EnvStateManager
from ragen.agent.metrics import rollout_metrics
from ragen.agent.policies import ModelPolicy
from ragen.agent.rollout import run_rollout
from ragen.agent.trajectory import Trajectory
from ragen.batching import TrainingBatch
from ragen.engines.hf_vlm import engine_for
from ragen.envs.base import derive_seed
from ragen.envs.registry import slug
from ragen.errors import ConfigError, EnvUnavailableError
from ragen.run_layout import RunLock, unwritable_error

from . import advantages, onepass, rollout_phase, run_checkpoints, scoring, update
from .checkpoint import CheckpointManager
from .collapse_guard import CollapseGuard
from .config import TrainConfig, changed_keys, to_yaml
from .dynamic_sampling import Curriculum
from .forward import token_log_probs, token_values
from .models import TrainModels, build_models, seed_everything
from .nonfinite import NonFiniteUpdate
from .phase_clock import PhaseClock
from .phase_context import PhaseContext
from .run_state import RunState
from .scoring import logprob_agreement
from .signals import StepAbandoned, StopSignals, TrainingInterrupted
from .trajectory_log import episode_records, should_log, turn_advantages

# names kept importable from here (tests, benches, the distributed code before the split)
__all__ = [
    "StarPOTrainer",
    "logprob_agreement",
    "seed_everything",
    "token_log_probs",
    "token_values",
    "train",
]


def _model_attr(name: str) -> property:
    return property(lambda self: getattr(self.models, name), doc=f"``self.models.{name}``")


class StarPOTrainer(RunState):
    """Multi-turn PPO/GRPO/TRICO trainer. ``StarPOTrainer(cfg).train()`` runs a whole job.

    ``scale_out``: called with the trainer once it is built, returns what runs rollouts
    on workers and the model phases on ranks (``ragen.distributed.ScaleOut``); needed
    when ``trainer.rollout_workers > 0`` or ``trainer.train_ranks > 1``."""

    # what the phases compute with lives in ``self.models`` (ragen.trainer.models)
    actor = _model_attr("actor")
    critic = _model_attr("critic")
    ref = _model_attr("ref")
    actor_opt = _model_attr("actor_opt")
    critic_opt = _model_attr("critic_opt")
    actor_sched = _model_attr("actor_sched")
    critic_sched = _model_attr("critic_sched")
    tokenizer = _model_attr("tokenizer")
    pad_id = _model_attr("pad_id")
    use_lora = _model_attr("use_lora")
    model_path = _model_attr("model_path")
    device = _model_attr("device")
    dtype = _model_attr("dtype")
    autocast = _model_attr("autocast")
    token_budget = _model_attr("token_budget")

    def __init__(
        self,
        cfg: TrainConfig,
        argv: Sequence[str] | None = None,
        scale_out: Callable[[StarPOTrainer], Any] | None = None,
    ):
        """``argv``: the ``ragen train`` arguments that built ``cfg``; the message after
        Ctrl-C/SIGTERM repeats them as the exact command that resumes the run."""
        self.cfg = cfg
        self.argv = None if argv is None else list(argv)
        t = cfg.trainer
        if (t.rollout_workers > 0 or t.train_ranks > 1) and scale_out is None:
            raise ConfigError(
                f"trainer.rollout_workers={t.rollout_workers} / trainer.train_ranks="
                f"{t.train_ranks} need the scale-out. Fix: run `ragen train`, or build the "
                "trainer as StarPOTrainer(cfg, scale_out=ragen.distributed.ScaleOut)"
            )
        self.signals = StopSignals()  # Ctrl-C / SIGTERM, see ragen.trainer.signals
        self._skip_reason = ""
        self._step_trained = False  # whether the last train_step() ran an update
        # (batch, step) of the last fresh rollout, trained on again (trainer.rollout_reuse)
        self._reused: tuple[TrainingBatch, int] | None = None
        seed_everything(t.seed)
        # a plug-in env (pkg.mod:CoinEnv, envs/coin.py:CoinEnv) names the folder by its class
        self.run_name = t.run_name or f"{slug(cfg.env.name)}-{cfg.algo.name}"
        self.run_dir = Path(t.run_dir or Path("runs") / self.run_name)

        # one training per folder, checked before anything is loaded or written
        self.run_lock = RunLock(self.run_dir).acquire()
        self.scale = None
        try:
            self._construct(cfg, scale_out)
        except BaseException:
            self.run_lock.release()
            raise

    def _construct(self, cfg: TrainConfig, scale_out) -> None:
        """The rest of ``__init__``, once the run folder is ours."""
        t = cfg.trainer
        self._build_envs()  # first: an env that cannot play fails before a model loads
        self.models: TrainModels = build_models(cfg)
        self._build_rollout()

        self.checkpoints = CheckpointManager(self.run_dir, keep_last=t.keep_last)
        # no room for one checkpoint: say so before the first step. Every run saves one at
        # its end (trainer.save_every=0 saves only that), so every run needs the room
        self._require_room_for_a_checkpoint()
        self.start_step = self._maybe_resume()
        # rollout workers / training ranks (trainer.rollout_workers, trainer.train_ranks):
        # Ray actors and a torch.distributed group, docs/SCALING.md; None: this process only
        if t.rollout_workers > 0 or t.train_ranks > 1:
            self.scale = scale_out(self)
        try:
            (self.run_dir / "config.yaml").write_text(to_yaml(cfg))
        except OSError as err:
            raise unwritable_error(self.run_dir, err) from None
        self.logger = self._open_logger(self.start_step)

        self.collapse_guard = CollapseGuard(self)  # echo-trap warnings, trainer.on_collapse

    def _build_envs(self) -> None:
        c, r = self.cfg, self.cfg.rollout
        env_config = dict(c.env.config)
        self.train_envs = EnvStateManager(
            c.env.name,
            env_config,
            env_groups=r.env_groups,
            group_size=r.group_size,
            seed=c.trainer.seed,
            train_states=c.env.train_states,
        )
        self.val_envs = EnvStateManager(
            c.env.name,
            {**env_config, **dict(c.env.val_config)},
            env_groups=c.trainer.val_groups,
            group_size=1,
            seed=c.trainer.seed,
        )
        # env.curriculum: training states no harder than a level that rises with success
        self.curriculum = None
        if c.env.curriculum.start is not None:
            cur = c.env.curriculum
            self.curriculum = Curriculum(cur.start, cur.step, cur.stop, cur.advance_at, cur.window)
            self.train_envs.max_difficulty = self.curriculum.max_difficulty

    def _build_rollout(self) -> None:
        c, r = self.cfg, self.cfg.rollout
        # The engine wraps the training model itself: generation always sees the latest weights.
        # model.engine's text engine (eager | static | compiled), or HFVLMEngine for a VLM
        self.engine = engine_for(self.actor, self.tokenizer, c.model.engine)
        self.policy = ModelPolicy(self.engine, self.tokenizer)
        self.rollout_cfg = r  # per rollout: a copy with its temperature and seed

    def _maybe_resume(self) -> int:
        """The step this run continues from (``trainer.resume``; 0: a fresh start)."""
        step, path = run_checkpoints.resume(
            self.cfg, self.checkpoints, self.models, self.curriculum
        )
        if path is not None:
            if self.curriculum is not None:
                self.train_envs.max_difficulty = self.curriculum.max_difficulty
            print(f"resumed from {path} at step {step}")
            self.supersede_after(step)
        return step

    def context(self) -> PhaseContext:
        """What this process's model phases read (one process: the no-op sync hook)."""
        return PhaseContext(self.cfg, self.models)

    # -- the loop --------------------------------------------------------------------
    def train(self) -> list[dict[str, float]]:
        """Run steps ``start_step+1 .. total_steps``; return each step's metrics.

        Stops early: normally (validated and saved like the last step) after the step
        that reaches ``trainer.max_minutes`` of wall clock; with a :class:`ConfigError` after
        ``trainer.max_consecutive_skipped_steps`` steps in a row that trained nothing;
        normally (the step saved) after a collapse warning with
        ``trainer.on_collapse=stop`` (with ``rollback`` it goes back to a checkpoint and
        continues, ``ragen.trainer.collapse_guard``); and with
        :class:`TrainingInterrupted` after SIGINT/SIGTERM: the step in
        progress is abandoned if its update has not begun (else finished), the last
        completed step is saved unless it already is, and the message holds the command
        that resumes the run.
        """
        t = self.cfg.trainer
        # the config is in the run folder; the console says where, and with trainer.console
        # what differs from the defaults (the whole YAML drowned the first screen)
        self.logger.print(f"run folder: {self.run_dir} (config: {self.run_dir / 'config.yaml'})")
        if t.console:
            changed = changed_keys(self.cfg)
            self.logger.print(
                "changed from the defaults: "
                + ", ".join(f"{k}={v}" for k, v in changed.items() if k != "trainer.run_dir")
            )
        if not self.cfg.algo.micro_token_budget:  # auto: say what it came to, to pin it
            self.logger.print(
                f"micro-batches of at most {self.models.token_budget} tokens "
                "(algo.micro_token_budget=0, auto: from the model and the free memory; "
                f"set algo.micro_token_budget={self.models.token_budget} to repeat this run "
                "on a machine with other free memory)"
            )
        history: list[dict[str, float]] = []
        done = self.start_step
        self._saved_step = self.start_step  # the newest checkpoint of these weights
        self._trained_since_save = False
        skipped_in_row = 0
        stop_note = ""
        started = time.perf_counter()
        if t.on_collapse == "rollback" and self.start_step == 0 and not self.checkpoints.list():
            self.save_checkpoint(0)  # somewhere to roll back to before the first save
        with self.signals.installed():
            try:
                step = self.start_step - 1
                while step + 1 < t.total_steps:
                    step += 1
                    if self.signals.signum is not None:
                        break
                    try:
                        with progress.labelled(f"step {step + 1}/{t.total_steps}"):
                            metrics = self.train_step(step)
                    except StepAbandoned:
                        break
                    finally:
                        self.signals.abandonable = False
                    done = step + 1
                    # the wall-clock budget ends the run like its last step would
                    last = done == t.total_steps or self._out_of_time(started)
                    if t.val_every and (done % t.val_every == 0 or last):
                        with progress.labelled(f"step {done}/{t.total_steps} validation"):
                            metrics.update(self.validate(step))
                    warnings = self.collapse_guard.observe(done, metrics)
                    self.logger.log(done, metrics)
                    history.append(metrics)
                    action = self.collapse_guard.act(done, warnings)
                    if action == "stop":
                        self._trained_since_save |= self._step_trained
                        self._save_if_trained(done)
                        break
                    if isinstance(action, int):  # rolled back to checkpoint `action`
                        self._reused = None  # the next step rolls out afresh
                        history = history[: max(action - self.start_step, 0)]
                        step, skipped_in_row = action - 1, 0
                        continue
                    trained = self._step_trained
                    self._trained_since_save |= trained
                    skipped_in_row = 0 if trained else skipped_in_row + 1
                    limit = t.max_consecutive_skipped_steps
                    if limit and skipped_in_row >= limit:
                        raise self._stalled_error(skipped_in_row, metrics)
                    if (t.save_every and done % t.save_every == 0) or last:
                        self._save_if_trained(done)
                    if last and done < t.total_steps:
                        self.logger.print(
                            f"step {done}: trainer.max_minutes={t.max_minutes:g} reached "
                            f"({(time.perf_counter() - started) / 60:.1f} min); stopping"
                        )
                        break
                if self.signals.signum is not None:
                    stop_note = self._save_on_stop(done)
            except (ConfigError, EnvUnavailableError) as err:
                # a stall (max_consecutive_skipped_steps) or an env that failed past
                # rollout.max_env_error_share: raised between updates, so the completed
                # steps are sound; save the trained ones and say how to go on
                raise self._stopped_by_error(err, done) from None
            finally:
                self.logger.close()
                self.close()
        if self.signals.signum is not None:
            raise TrainingInterrupted(self.signals.signum, f"{stop_note} {self.resume_hint()}")
        return history

    def _out_of_time(self, started: float) -> bool:
        """Whether ``trainer.max_minutes`` of wall clock have passed since ``started``."""
        limit = self.cfg.trainer.max_minutes
        return limit is not None and time.perf_counter() - started >= 60 * limit

    def close(self) -> None:
        """Stop the rollout workers and training ranks, if any, and free the run folder
        for another training (``train()`` does it)."""
        if self.scale is not None:
            self.scale.close()
            self.scale = None
        if getattr(self, "run_lock", None) is not None:  # a rank replica holds none
            self.run_lock.release()

    def phases(self) -> Any:
        """Who runs the model phases of a step (``ragen.trainer.phase_context.ModelPhases``:
        ``score_batch``, ``update``, ``reasoning_stats``, ``whole_state``): this trainer,
        or with ``trainer.train_ranks > 1`` the ranks (``ragen.distributed``)."""
        updater = self.scale.updater if self.scale is not None else None
        return updater or self

    @contextlib.contextmanager
    def whole_state(self, load: bool = False):
        """``(actor, critic, optimizers)`` whole, as a checkpoint holds them: in one process
        the trainer's own (sharded ranks gather them, and after ``load=True`` put back)."""
        yield self.actor, self.critic, self.optimizers()

    def rollout(self, manager, seeds: list[int], temperature: float, sample_seed: int):
        cfg = dataclasses.replace(self.rollout_cfg, temperature=temperature, seed=sample_seed)
        if self.scale is not None and self.scale.collector is not None:
            return self.scale.rollout(manager, cfg, seeds)  # on the rollout workers
        return run_rollout(self.policy, manager, cfg, seeds)

    def train_step(self, step: int) -> dict[str, float]:
        """One step: rollout -> filter -> batch -> scores -> advantages -> update."""
        a = self.cfg.algo
        if self._reusing(step):
            return self._reuse_step(step)
        clock = PhaseClock()
        # Until the update begins nothing outlives the step (seeds derive from the step
        # number), so a signal may abandon it here (ragen.trainer.signals).
        self.signals.abandonable = True
        with clock("rollout"):
            played = rollout_phase.collect(self.rollout, self.train_envs, self.cfg, step)
        trajectories, metrics = played.trajectories, played.metrics
        self._after_rollout(step, played, metrics, clock)

        with clock("prepare"):
            keep, kept, filter_metrics = rollout_phase.filter_trainable(trajectories, a)
            metrics.update(filter_metrics)
            if not kept:
                return self._untrained_step(step, trajectories, keep, metrics, clock)
            batch = self.prepare_batch(kept)
            # how many samples have someone to be compared with (a group of one: none)
            counts = torch.bincount(batch.index)
            metrics["actor/baseline_shared_frac"] = float((counts[batch.index] > 1).float().mean())

        critic_stats = self._score(batch, step, metrics, clock)
        with clock("advantage"):
            advantages.advantage_phase(a, batch, metrics, estimated=critic_stats is not None)
        self._log_trajectories(step, trajectories, keep, kept, batch)
        with clock("update"):
            metrics.update(self._update(batch, step, critic_stats, metrics))
        self._after_update(batch, step, metrics)

        metrics.update(clock.metrics())
        update_s = clock.seconds["timing/update"]
        n_train_tokens = float(batch.attention_mask.sum())
        metrics["perf/update_tokens_per_s"] = n_train_tokens / max(update_s, 1e-9)
        metrics["perf/rollout_tokens_per_s"] = float(played.stats.get("tokens_per_s", 0.0))
        metrics["perf/num_trained_samples"] = float(len(kept))
        return metrics

    # -- the phases of a step, in order --------------------------------------------------
    def _reusing(self, step: int) -> bool:
        """Whether step ``step`` trains again on the last fresh rollout
        (``trainer.rollout_reuse``) instead of playing a new one."""
        reuse = self.cfg.trainer.rollout_reuse
        return self._reused is not None and 0 < step - self._reused[1] < reuse

    def _after_rollout(self, step: int, played, metrics: dict[str, float], clock) -> None:
        """What the rollout tells the run: the curriculum's level, context overflows,
        scale-out events, and the reasoning statistics (one more forward pass)."""
        if self.curriculum is not None:  # the level rises with measured success
            metrics["curriculum/level"] = float(self.curriculum.level)
            if self.curriculum.observe(metrics["rollout/success_rate"]):
                self.train_envs.max_difficulty = self.curriculum.max_difficulty
                self.logger.print(f"step {step + 1}: curriculum level -> {self.curriculum.level:g}")
        metrics.update(rollout_phase.context_checks(played.stats))
        if self.scale is not None:  # weight-sync time, worker restarts (logged as events)
            metrics.update(self.scale.after_rollout(step + 1, played.stats))
        if self.cfg.trainer.reasoning_samples:
            # reasoning/cond_entropy, reasoning/mutual_info: does the thought still depend
            # on the prompt? (ragen.trainer.reasoning_stats)
            with clock("reasoning_stats"):
                metrics.update(self.phases().reasoning_stats(played.trajectories, step))

    def _untrained_step(self, step, trajectories, keep, metrics, clock) -> dict[str, float]:
        """The metrics of a step whose filter kept nothing to train on: no update."""
        self._log_trajectories(step, trajectories, keep)
        self._skip_reason = "filter" if not any(keep) else "overflow"
        self.logger.print(
            f"step {step + 1}: no trainable trajectories (filtered out, or the context "
            "overflowed before their first response: raise rollout.max_model_len); "
            "skipping the update"
        )
        self._step_trained = False
        # the clock's phases so far, without timing/step (as before the clock)
        return {**metrics, **clock.seconds, "trainer/untrained_step": 1.0}

    def _score(self, batch: TrainingBatch, step: int, metrics, clock) -> dict | None:
        """The batch's old log-probs and values, timed as ``timing/old_log_prob`` or,
        in one process, folded into the update's own forward (``ragen.trainer.onepass``):
        then the critic's update runs here, its forward giving the values (timed as
        ``timing/critic``). Returns that critic update's metrics (None when it did not
        run here: the advantages are then not estimated from its forward)."""
        # The engine keeps per-row KV caches between turns; free them before the update
        # (the weights are about to change, and on a GPU that memory is needed now).
        self.engine.clear_prefix_cache()
        phases = self.phases()  # this process, or the ranks (trainer.train_ranks > 1)
        if not self._old_from_update(batch):
            with clock("old_log_prob"):
                phases.score_batch(batch, metrics)
            return None
        if self.critic is None:
            return None
        critic_pass = onepass.shares_critic_forward(self.cfg, batch.size, phases is not self)
        with clock("critic"):
            if not critic_pass:
                self.compute_values(batch)
                return None
            self.signals.abandonable = False  # it changes weights: the step finishes
            try:
                return update.critic_update_pass(self.context(), batch, step)
            except NonFiniteUpdate as err:
                raise self._nonfinite_error(step, batch, str(err), metrics) from None

    def _old_from_update(self, batch: TrainingBatch) -> bool:
        """Whether the update's own forward gives ``batch``'s old log-probs (one process,
        one epoch over one minibatch: ``ragen.trainer.onepass``)."""
        return onepass.shares_actor_forward(self.cfg, batch.size, self.phases() is not self)

    def _update(self, batch: TrainingBatch, step: int, critic_stats, metrics) -> dict[str, float]:
        """The PPO update (in this process with the old log-probs from its forward, or
        on the ranks), and the log-prob agreement its forward measured."""
        self.signals.abandonable = False  # from here on the step changes weights: it finishes
        fused = self._old_from_update(batch)
        try:
            if fused:  # one process by construction (onepass)
                out = update.ppo_update(self.context(), batch, step, critic_stats, True)
            else:  # scored before: this process's update, or the ranks' (data-parallel)
                out = self.phases().update(batch, step)
        except NonFiniteUpdate as err:
            raise self._nonfinite_error(step, batch, str(err), metrics) from None
        self._step_trained = True
        if fused and step >= self.cfg.trainer.critic_warmup:
            out.update(logprob_agreement(batch))  # filled by the update's forward
        return out

    def _after_update(self, batch: TrainingBatch, step: int, metrics) -> None:
        """The schedulers' step, and the batch kept for ``trainer.rollout_reuse``."""
        t = self.cfg.trainer
        actor_trained = step >= t.critic_warmup  # before: the critic alone trained
        metrics["trainer/critic_warmup"] = float(not actor_trained)
        # the rate this update ran at (read before the scheduler moves to the next one)
        metrics["actor/lr"] = self.actor_sched.get_last_lr()[0]
        if actor_trained:  # the actor's schedule starts with its first update
            self.actor_sched.step()
        if self.critic_sched is not None:
            self.critic_sched.step()
        # a critic warm-up step's batch is not reused: the actor's forward did not run, so
        # the one-pass path left it without the behaviour log-probs a reuse step needs
        if t.rollout_reuse > 1 and actor_trained:
            self._reused = (batch, step)
            metrics["rollout/reuse_age"] = 0.0  # fresh (later steps: how stale)

    def _reuse_step(self, step: int) -> dict[str, float]:
        """Step ``step`` without a rollout (``trainer.rollout_reuse``): one more update on
        the kept samples of the last fresh rollout, with its advantages and behaviour
        log-probs, so the data is ``rollout/reuse_age`` updates stale. No rollout, filter
        or reasoning metrics are logged for such a step."""
        batch, fresh = self._reused
        self.signals.abandonable = False  # the update changes weights: it finishes
        tic = time.perf_counter()
        try:  # the whole update, critic included, on the kept behaviour log-probs
            metrics = dict(self.phases().update(batch, step))
        except NonFiniteUpdate as err:
            raise self._nonfinite_error(step, batch, str(err), {}) from None
        self._step_trained = True
        lr = self.actor_sched.get_last_lr()[0]  # the rate this update ran at
        self.actor_sched.step()
        if self.critic_sched is not None:
            self.critic_sched.step()
        update_s = time.perf_counter() - tic
        metrics.update(
            {
                "rollout/reuse_age": float(step - fresh),
                "timing/update": update_s,
                "timing/step": update_s,
                "perf/num_trained_samples": float(batch.size),
                "actor/lr": lr,
            }
        )
        return metrics

    def _log_trajectories(self, step, trajectories, keep, kept=(), batch=None) -> None:
        """Write step ``step + 1``'s episodes (bounded; ``ragen.trainer.trajectory_log``)
        with the filter's verdict and, for the ``kept`` samples in ``batch``, the mean
        advantage each turn is trained with."""
        t = self.cfg.trainer
        if not t.save_trajectories:
            return
        if not should_log(step + 1, t.log_trajectories_every, t.total_steps):
            return
        advantages = {}
        if batch is not None and batch.advantages is not None:
            rows = {id(tr): i for i, tr in enumerate(kept)}
            adv, mask = batch.advantages.float().cpu(), batch.response_mask.cpu()
            for i, tr in enumerate(trajectories):
                if id(tr) in rows:
                    r = rows[id(tr)]
                    advantages[i] = turn_advantages(tr, adv[r].tolist(), mask[r].tolist())
        records = episode_records(
            trajectories, keep=keep, advantages=advantages, max_episodes=t.log_trajectories_max
        )
        self.logger.log_trajectories(step + 1, records)

    # -- the model phases, in this process (``ModelPhases``) ------------------------------
    def reasoning_stats(self, trajectories: list[Trajectory], step: int) -> dict[str, float]:
        return scoring.reasoning_stats(self.context(), trajectories, step)

    def prepare_batch(self, trajectories: list[Trajectory]) -> TrainingBatch:
        """The kept episodes as a :class:`TrainingBatch` on the training device
        (:func:`ragen.trainer.rollout_phase.prepare_batch`)."""
        return rollout_phase.prepare_batch(trajectories, self.cfg.algo, self.pad_id, self.device)

    def score_batch(self, batch: TrainingBatch, metrics: dict[str, float]) -> None:
        """Old (and reference) log-probs, and values (``ragen.trainer.scoring``)."""
        scoring.score_batch(self.context(), batch, metrics)

    def compute_old_log_probs(self, batch: TrainingBatch, metrics: dict[str, float]) -> None:
        scoring.compute_old_log_probs(self.context(), batch, metrics)

    def compute_values(self, batch: TrainingBatch) -> None:
        scoring.compute_values(self.context(), batch)

    def compute_advantages(
        self, batch: TrainingBatch, metrics: dict[str, float], estimated: bool = False
    ) -> None:
        """Advantages and returns (``ragen.trainer.advantages.compute_advantages``)."""
        advantages.compute_advantages(self.cfg.algo, batch, metrics, estimated=estimated)

    def update(self, batch: TrainingBatch, step: int) -> dict[str, float]:
        """The PPO epochs over ``batch`` (``ragen.trainer.update.ppo_update``)."""
        return update.ppo_update(self.context(), batch, step)

    # -- validation ------------------------------------------------------------------
    def validate(self, step: int) -> dict[str, float]:
        tic = time.perf_counter()
        seeds = self.val_envs.validation_seeds(self.cfg.trainer.val_groups)
        result = self.rollout(
            self.val_envs,
            seeds,
            self.cfg.trainer.val_temperature,
            derive_seed(self.cfg.trainer.seed, "val", step),
        )
        out = {f"val/{k}": v for k, v in rollout_metrics(result.trajectories, 1).items()}
        if self.cfg.trainer.save_trajectories:
            records = episode_records(result.trajectories)
            self.logger.log_trajectories(step + 1, records, kind="val_step")
        out["timing/validation"] = time.perf_counter() - tic
        return out


def train(
    cfg: TrainConfig, argv: Sequence[str] | None = None, scale_out=None
) -> list[dict[str, float]]:
    """Run a whole training job from a resolved config (``argv``, ``scale_out``: see
    :class:`StarPOTrainer`)."""
    return StarPOTrainer(cfg, argv=argv, scale_out=scale_out).train()
