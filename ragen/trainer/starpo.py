"""The StarPO training loop (RAGEN), with StarPO-S and TRICO as configurations of it.

One step, top to bottom (docs/ARCHITECTURE.md draws it as data)::

    rollout (training seeds, env_groups x group_size, <= max_turns)
      -> scores (episode reward incl. format shaping) -> StarPO-S group filter (raw scores)
      -> normalization (ARPO / BRPO / GRPO-style) -> reward placement (last token | turn ends)
      -> old log-probs (recomputed by the training model) [-> reference log-probs if KL]
      -> values (critic) -> advantages (registered estimator)
      -> ppo_epochs x minibatches, each micro-batched by a token budget (grad accumulation)
      -> critic update -> metrics -> periodic validation
      -> collapse detector (warn | stop | rollback, ragen.trainer.collapse_guard) -> checkpoint

Before the filter, up to ``trainer.reasoning_samples`` samples' thoughts are cross-scored
under every distinct prompt of the step (``reasoning/mutual_info``, ``..._token``, ...).

Every tensor is (B, T) over the training sequence and aligned to token positions:
``log_prob[:, t] = log p(input_ids[:, t] | input_ids[:, <t])`` and ``values[:, t]`` is the
critic's value of the prefix before token ``t`` (the state in which token ``t`` was
chosen). Only positions with ``response_mask == 1`` (sampled ids) are trained.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import random
import shlex
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ragen import algo
from ragen.agent.trajectory import Trajectory
from ragen.envs.base import derive_seed
from ragen.errors import ConfigError, NonFiniteError
from ragen.models.logprobs import sequence_logprobs
from ragen.models.precision import cpu_autocast
from ragen.models.value import critic_values
from ragen.models.vlm import forward_inputs, is_processor, row_images, text_tokenizer

from . import onepass, setup
from .batching import (
    TrainingBatch,
    baseline_groups,
    collate,
    filter_sample_values,
    floor_advantages,
    mask_certain_tokens,
    micro_batches,
    padding_fraction,
    place_rewards,
)
from .config import TrainConfig, to_dict, to_yaml
from .dynamic_sampling import Curriculum, sample_informative
from .nonfinite import NonFiniteUpdate, nonfinite_loss
from .signals import StepAbandoned, StopSignals, TrainingInterrupted


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


# --------------------------------------------------------------------------------------
# forward passes
# --------------------------------------------------------------------------------------
def token_log_probs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float,
    response_mask: torch.Tensor,
    with_entropy: bool = False,
    **model_inputs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of the response tokens given their prefixes.

    input_ids, attention_mask, response_mask: (B, T). Returns log_prob (B, T) and entropy
    (B, T) of the next-token distribution that chose token t, both 0 off the response.
    The distribution is softmax(logits / temperature), the one generation sampled from.
    The LM head runs only at positions that predict a response token
    (``ragen.models.logprobs.sequence_logprobs``). ``model_inputs``: a VLM's pixel
    inputs for the rows' pictures (:meth:`StarPOTrainer.vision_inputs`).
    """
    return sequence_logprobs(
        model,
        input_ids,
        attention_mask,
        temperature=max(temperature, 1e-6),
        positions=response_mask,
        with_entropy=with_entropy,
        **model_inputs,
    )


def token_values(
    critic: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    positions: torch.Tensor | None = None,
    **model_inputs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Critic values aligned to positions, and the value of each whole row.

    input_ids, attention_mask: (B, T), right-padded. Returns ``values`` (B, T) with
    ``values[:, t] = V(prefix before token t)``, and ``final`` (B,) = V(the whole row):
    the value of the state after the row's last token, which a truncated episode
    bootstraps from. ``positions`` (B, T): where values are wanted (the advantage
    mask); given, a prompt prefix all rows share runs once
    (``ragen.models.value.critic_values``) and ``values`` is 0 inside it.
    """
    out = critic_values(critic, input_ids, attention_mask, positions, **model_inputs)
    values = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    values[:, 1:] = out[:, :-1]
    last = attention_mask.sum(-1).long() - 1
    final = out.gather(1, last[:, None])[:, 0]
    return values, final


def logprob_agreement(batch: TrainingBatch) -> dict[str, float]:
    """How far the trainer's old log-probs are from the generation's, on sampled ids.

    Generation and training use the same weights; a gap here means a numerical or
    template mismatch between the engine and the trainer, or a rollout worker holding
    other weights (worth a look if large)."""
    mask = batch.response_mask
    diff = (batch.old_log_prob - batch.gen_log_prob).abs()
    return {
        "actor/gen_logprob_abs_diff": float(algo.masked_mean(diff, mask)),
        "actor/gen_logprob_max_diff": float((diff * mask).max()),
    }


# --------------------------------------------------------------------------------------
class StarPOTrainer:
    """Multi-turn PPO/GRPO/TRICO trainer. ``StarPOTrainer(cfg).train()`` runs a whole job."""

    _nonfinite_loss = ""  # the first NaN/inf loss of the current minibatch, if any
    # sharded ranks run every backward (their gradient reduction is a collective): a
    # NaN/inf loss is back-propagated there, and its NaN gradient stops every rank alike
    _collective_backward = False

    def __init__(self, cfg: TrainConfig, argv: Sequence[str] | None = None):
        """``argv``: the ``ragen train`` arguments that built ``cfg``; the message after
        Ctrl-C/SIGTERM repeats them as the exact command that resumes the run."""
        self.cfg = cfg
        self.argv = None if argv is None else list(argv)
        t = cfg.trainer
        self.signals = StopSignals()  # Ctrl-C / SIGTERM, see ragen.trainer.signals
        self._skip_reason = ""
        self._step_trained = False  # whether the last train_step() ran an update
        # (batch, step) of the last fresh rollout, trained on again (trainer.rollout_reuse)
        self._reused: tuple[TrainingBatch, int] | None = None
        seed_everything(t.seed)
        self.run_name = t.run_name or f"{cfg.env.name}-{cfg.algo.name}"
        self.run_dir = Path(t.run_dir or Path("runs") / self.run_name)
        from .run_lock import RunLock

        # one training per folder, checked before anything is loaded or written
        self.run_lock = RunLock(self.run_dir).acquire()
        try:
            self._construct(cfg)
        except BaseException:
            self.run_lock.release()
            raise

    def _construct(self, cfg: TrainConfig) -> None:
        """The rest of ``__init__``, once the run folder is ours."""
        t = cfg.trainer
        from ragen.models.loading import pick_device, pick_dtype

        self.device = pick_device(cfg.model.device, key="model.device")
        self.dtype = pick_dtype(self.device, cfg.model.dtype, training=True)
        self.autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16)
            if t.bf16 and self.device.type == "cuda" and torch.cuda.is_bf16_supported()
            else cpu_autocast(t.bf16_cpu and self.device.type == "cpu")
        )
        self._build_envs()  # first: an env that cannot play fails before a model loads
        self._build_models()
        from ragen.models.memory import resolve_token_budget

        # the micro-batch's tokens: what fits in memory, checked before the first step
        self.token_budget = resolve_token_budget(
            self.actor, self.device, cfg.algo.micro_token_budget, "algo.micro_token_budget", 8192
        )
        self._build_rollout()
        from .checkpoint import CheckpointManager

        self.checkpoints = CheckpointManager(self.run_dir, keep_last=t.keep_last)
        self.start_step = self._maybe_resume()
        # rollout workers / training ranks (trainer.rollout_workers, trainer.train_ranks):
        # Ray actors and a torch.distributed group, docs/SCALING.md; None: this process only
        self.scale = None
        if t.rollout_workers > 0 or t.train_ranks > 1:
            from ragen.distributed import ScaleOut

            self.scale = ScaleOut(self)
        try:
            (self.run_dir / "config.yaml").write_text(to_yaml(cfg))
        except OSError as err:
            from .run_lock import unwritable_error

            raise unwritable_error(self.run_dir, err) from None
        self.logger = self._open_logger(self.start_step)
        from .collapse_guard import CollapseGuard

        self.collapse_guard = CollapseGuard(self)  # echo-trap warnings, trainer.on_collapse

    def _open_logger(self, start_step: int):
        from .metrics_logger import MetricsLogger

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

    # -- construction ----------------------------------------------------------------
    def _build_models(self) -> None:
        from ragen.models import load_policy
        from ragen.models.loading import resolve_model
        from ragen.models.value import create_critic

        m = self.cfg.model
        path = resolve_model(m.path, seed=0)
        self.model_path = path
        actor, tokenizer = load_policy(path, device=str(self.device), dtype=self.dtype)
        self.tokenizer = tokenizer
        if m.gradient_checkpointing:
            actor.gradient_checkpointing_enable()
            actor.config.use_cache = False
        self.use_lora = m.lora.rank > 0
        if self.use_lora:
            actor = setup.apply_lora(actor, m.lora)
        self.actor = actor
        self.ref = None
        if self.cfg.algo.kl_coef > 0 and not self.use_lora:
            # A frozen copy of the initial policy. With LoRA the reference is the same
            # model with adapters disabled (no second copy in memory).
            self.ref = copy.deepcopy(actor).eval().requires_grad_(False)
        self.critic = None
        if self.cfg.algo.use_critic:
            self.critic = create_critic(
                m.critic_path or path, device=str(self.device), dtype=self.dtype
            )
            if m.gradient_checkpointing:
                self.critic.gradient_checkpointing_enable()
        self.actor_opt = setup.make_optimizer(self.actor, m.actor_lr, m.weight_decay)
        self.actor_sched = setup.make_scheduler(self.actor_opt, m.warmup_steps)
        self.critic_opt = self.critic_sched = None
        if self.critic is not None:
            self.critic_opt = setup.make_optimizer(self.critic, m.critic_lr, m.weight_decay)
            self.critic_sched = setup.make_scheduler(self.critic_opt, m.warmup_steps)
        text_tok = text_tokenizer(tokenizer)  # a VLM's processor holds its tokenizer
        self.pad_id = (
            text_tok.pad_token_id if text_tok.pad_token_id is not None else text_tok.eos_token_id
        )

    def _build_envs(self) -> None:
        from ragen.agent.env_manager import EnvStateManager

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
        from ragen.agent.policies import ModelPolicy
        from ragen.engines.hf_vlm import engine_for

        c, r = self.cfg, self.cfg.rollout
        # The engine wraps the training model itself: generation always sees the latest weights.
        # model.engine's text engine (eager | static | compiled), or HFVLMEngine for a VLM
        self.engine = engine_for(self.actor, self.tokenizer, c.model.engine)
        self.policy = ModelPolicy(self.engine, self.tokenizer)
        self.rollout_cfg = r  # per rollout: a copy with its temperature and seed

    def _maybe_resume(self) -> int:
        resume = self.cfg.trainer.resume
        if resume == "never":
            if self.checkpoints.list():
                from .checkpoint import CheckpointError

                raise CheckpointError(
                    f"{self.run_dir} already holds checkpoints; refusing to overwrite them. "
                    "Fix: add trainer.resume=auto to continue, or choose another trainer.run_name"
                )
            return 0
        path = self.checkpoints.latest() if resume == "auto" else Path(resume)
        if path is None:
            return 0
        state = self.checkpoints.load(
            path,
            actor=self.actor,
            critic=self.critic,
            optimizers=self._optimizers(),
            schedulers=self._schedulers(),
            config=to_dict(self.cfg),
        )
        saved_seed = state.get("seed", self.cfg.trainer.seed)
        if saved_seed != self.cfg.trainer.seed:
            from .checkpoint import CheckpointError

            # the training seeds of every step derive from trainer.seed: another seed
            # would silently replay or skip initial states
            raise CheckpointError(
                f"{path} was trained with trainer.seed={saved_seed}, not "
                f"{self.cfg.trainer.seed}. Fix: resume with trainer.seed={saved_seed}"
            )
        if self.curriculum is not None:  # the level it had reached
            self.curriculum.restore(state.get("curriculum"))
            self.train_envs.max_difficulty = self.curriculum.max_difficulty
        step = int(state["step"])
        print(f"resumed from {path} at step {step}")
        self._supersede_after(step)
        return step

    def _supersede_after(self, step: int) -> None:
        """Resuming from a checkpoint that is not the run's latest: move the later
        checkpoints and the logs of later steps into ``run_dir/superseded/<time>/`` (kept,
        never deleted), so the run continues from ``step`` with every step logged once."""
        from .checkpoint import step_of
        from .metrics_logger import move_logs_after

        later = [p for p in self.checkpoints.list() if step_of(p) > step]
        if not later:
            return  # a plain resume: the logger drops the lines of the steps it redoes
        dest = self.run_dir / "superseded" / time.strftime("%Y%m%d-%H%M%S")
        n = 1
        while dest.exists():
            n += 1
            dest = dest.with_name(f"{dest.name.split('.')[0]}.{n}")
        moved = self.checkpoints.move_after(step, dest / "checkpoints")
        logs = move_logs_after(self.run_dir, step, dest)
        names = ", ".join(p.name for p in moved)
        print(
            f"resuming from step {step}, before the run's latest checkpoint: moved the later "
            f"checkpoints ({names}){' and their logs' if logs else ''} aside to {dest} "
            "(kept; delete it once you no longer need it)"
        )

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        out = {"actor": self.actor_opt}
        if self.critic_opt is not None:
            out["critic"] = self.critic_opt
        return out

    def _schedulers(self) -> dict[str, Any]:
        out = {"actor": self.actor_sched}
        if self.critic_sched is not None:
            out["critic"] = self.critic_sched
        return out

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
        self.logger.print(f"run folder: {self.run_dir}\n{to_yaml(self.cfg)}")
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
                        metrics = self.train_step(step)
                    except StepAbandoned:
                        break
                    finally:
                        self.signals.abandonable = False
                    done = step + 1
                    # the wall-clock budget ends the run like its last step would
                    last = done == t.total_steps or self._out_of_time(started)
                    if t.val_every and (done % t.val_every == 0 or last):
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

    def resume_hint(self) -> str:
        """The exact command that continues this run from its newest checkpoint."""
        if self.argv is None:
            return "To resume, rerun the same command with trainer.resume=auto."
        args = [a for a in self.argv if not a.startswith("trainer.resume=")]
        command = shlex.join(["ragen", "train", *args, "trainer.resume=auto"])
        return f"To resume: {command}"

    def _stalled_error(self, skipped: int, metrics: dict[str, float]) -> ConfigError:
        """The one-line error after ``skipped`` consecutive steps that trained nothing."""
        r, f = self.cfg.rollout, self.cfg.algo.filter
        head = f"{skipped} consecutive steps trained nothing, so the run stops"
        tail = (
            "no checkpoint was written for them (trainer.max_consecutive_skipped_steps=0 "
            "never stops)"
        )
        if self._skip_reason == "filter":
            std = metrics.get("filter/std_max_before", float("nan"))
            zero = "" if f.include_zero else ", set algo.filter.include_zero=true"
            return ConfigError(
                f"{head}: the StarPO-S filter (algo.filter.strategy={f.strategy}, "
                f"algo.filter.value={f.value}, algo.filter.include_zero={f.include_zero}) "
                f"kept no group (largest in-group reward std {std:.3g}). Fix: lower "
                f"algo.filter.value{zero}, or raise rollout.group_size for more varied "
                f"groups; {tail}"
            )
        rate = metrics.get("rollout/truncation_rate", float("nan"))
        return ConfigError(
            f"{head}: the context overflowed rollout.max_model_len={r.max_model_len} before "
            f"the first response of every kept episode (rollout/truncation_rate={rate:.3g}). "
            "Fix: raise rollout.max_model_len, or shorten the prompt (env config, "
            f"rollout.max_turns, rollout.context_window); {tail}"
        )

    def _nonfinite_error(
        self, step: int, batch: TrainingBatch, what: str, metrics: dict[str, float]
    ) -> NonFiniteError:
        """Save step ``step + 1``'s batch for inspection; the one-line error that stops the
        run (``ragen.trainer.nonfinite``)."""
        from .checkpoint import step_dir_name
        from .nonfinite import NONFINITE_DIR, save_step_data

        m, a = self.cfg.model, self.cfg.algo
        folder = self.run_dir / NONFINITE_DIR / step_dir_name(step + 1)
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
        tensors = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
        save_step_data(folder, tensors, report)
        saved = getattr(self, "_saved_step", 0)
        kept = (
            f"the last checkpoint is {self.checkpoints.path_for(saved)}"
            if saved
            else "no checkpoint was saved yet"
        )
        return NonFiniteError(
            f"step {step + 1}: {what}, so the run stops before that optimizer step; the "
            f"step's batch is saved in {folder} for "
            f"inspection; {kept}. Fix: lower model.actor_lr (now {m.actor_lr:g}) or "
            f"model.critic_lr (now {m.critic_lr:g}), or look for inf/NaN rewards in "
            f"{folder}/batch.pt. {self.resume_hint()}"
        )

    def save_checkpoint(self, step: int) -> Path:
        """Save ``step``; signals arriving meanwhile wait until the checkpoint is complete."""
        from .checkpoint import DiskFullError

        with self.signals.saving():
            try:
                path = self._write_checkpoint(step)
            except DiskFullError as err:  # the message gains the command that resumes
                raise DiskFullError(f"{err}. {self.resume_hint()}") from None
        self._saved_step = step
        self._trained_since_save = False
        return path

    def _write_checkpoint(self, step: int) -> Path:
        with self.phases().whole_state() as (actor, critic, optimizers):
            return self._save(step, actor, critic, optimizers)

    def _save(self, step: int, actor, critic, optimizers) -> Path:
        return self.checkpoints.save(
            step,
            actor=actor,
            tokenizer=self.tokenizer,
            critic=critic,
            optimizers=optimizers,
            schedulers=self._schedulers(),
            trainer_state={
                "step": step,
                "seed": self.cfg.trainer.seed,
                **({"curriculum": self.curriculum.state()} if self.curriculum else {}),
            },
            config=to_dict(self.cfg),
            overwrite=False,
        )

    def phases(self) -> Any:
        """Who runs the model phases of a step (``ragen.distributed.phases.ModelPhases``:
        ``score_batch``, ``update``, ``reasoning_stats``, ``whole_state``): this trainer,
        or with ``trainer.train_ranks > 1`` the ranks (``ragen.distributed``)."""
        updater = self.scale.updater if self.scale is not None else None
        return updater or self

    @contextlib.contextmanager
    def whole_state(self, load: bool = False):
        """``(actor, critic, optimizers)`` whole, as a checkpoint holds them: in one process
        the trainer's own (sharded ranks gather them, and after ``load=True`` put back)."""
        yield self.actor, self.critic, self._optimizers()

    def rollout(self, manager, seeds: list[int], temperature: float, sample_seed: int):
        from ragen.agent.rollout import run_rollout

        cfg = dataclasses.replace(self.rollout_cfg, temperature=temperature, seed=sample_seed)
        if self.scale is not None and self.scale.collector is not None:
            return self.scale.rollout(manager, cfg, seeds)  # on the rollout workers
        return run_rollout(self.policy, manager, cfg, seeds)

    def train_step(self, step: int) -> dict[str, float]:
        from ragen.agent.metrics import rollout_metrics

        a, t = self.cfg.algo, self.cfg.trainer
        if self._reused is not None and 0 < step - self._reused[1] < t.rollout_reuse:
            return self._reuse_step(step)
        timing: dict[str, float] = {}
        # Until the update begins nothing outlives the step (seeds derive from the step
        # number), so a signal may abandon it here (ragen.trainer.signals).
        self.signals.abandonable = True
        tic = time.perf_counter()
        results = []  # each rollout of the step: round 0, then dynamic sampling's refills

        def rollout_round(r: int) -> list[Trajectory]:
            key = (step,) if r == 0 else (step, "refill", r)
            results.append(
                self.rollout(
                    self.train_envs,
                    self.train_envs.seeds_for_step(step, draw=r),
                    self.cfg.rollout.temperature,
                    derive_seed(t.seed, "rollout", *key),
                )
            )
            return results[-1].trajectories

        sampling: dict[str, float] = {}
        if a.dynamic_sampling.enabled:  # only groups whose episodes disagree (DAPO)
            d = a.dynamic_sampling
            trajectories, first, sampling = sample_informative(
                rollout_round, self.cfg.rollout.env_groups, self.cfg.rollout.group_size,
                d.on, d.max_rounds,
            )  # fmt: skip
        else:
            trajectories = first = rollout_round(0)
        result = results[0]
        timing["timing/rollout"] = time.perf_counter() - tic
        # the reasoning rewards keep their own top-level keys (reward/grounding, ...);
        # the step's metrics are round 0's, the batch any run would have rolled out
        metrics = {
            k if k.startswith("reward/") else f"rollout/{k}": v
            for k, v in rollout_metrics(first, self.cfg.rollout.group_size).items()
        }
        metrics.update(sampling)
        if self.curriculum is not None:  # the level rises with measured success
            metrics["curriculum/level"] = float(self.curriculum.level)
            if self.curriculum.observe(metrics["rollout/success_rate"]):
                self.train_envs.max_difficulty = self.curriculum.max_difficulty
                self.logger.print(f"step {step + 1}: curriculum level -> {self.curriculum.level:g}")
        # token-exactness checks of the context: both should stay 0 (docs/ROLLOUT.md)
        for key in ("context_inexact", "context_fallbacks"):
            metrics[f"rollout/{key}"] = float(result.stats.get(key, 0.0))
        if self.scale is not None:  # weight-sync time, worker restarts (logged as events)
            metrics.update(self.scale.after_rollout(step + 1, result.stats))
        if t.reasoning_samples:
            # reasoning/cond_entropy, reasoning/mutual_info: does the thought still depend
            # on the prompt? (one extra forward pass, ragen.trainer.reasoning_stats)
            tic = time.perf_counter()
            metrics.update(self.phases().reasoning_stats(trajectories, step))
            timing["timing/reasoning_stats"] = time.perf_counter() - tic

        # StarPO-S filter on RAW episode scores (never on normalized ones: docs/ARCHITECTURE.md, "Pitfalls")
        tic = time.perf_counter()
        scores = torch.tensor([tr.episode_reward for tr in trajectories], dtype=torch.float32)
        index = torch.tensor([tr.group_id for tr in trajectories], dtype=torch.long)
        keep, filter_metrics = algo.filter_groups(
            scores,
            index,
            episode_ids=[tr.episode_id for tr in trajectories],  # a windowed episode counts once
            strategy=a.filter.strategy,
            value=a.filter.value,
            include_zero=a.filter.include_zero,
            metric=a.filter.metric,
            sample_values=filter_sample_values(trajectories, a.filter.metric),
        )
        metrics.update({f"filter/{k}": float(v) for k, v in filter_metrics.items()})
        # An episode whose very first prompt overflowed max_model_len has no tokens to train.
        kept = [
            tr for tr, k in zip(trajectories, keep.tolist()) if k and tr.num_response_tokens > 0
        ]
        if not kept:
            self._log_trajectories(step, trajectories, keep.tolist())
            self._skip_reason = "filter" if not keep.any() else "overflow"
            self.logger.print(
                f"step {step + 1}: no trainable trajectories (filtered out, or the context "
                "overflowed before their first response: raise rollout.max_model_len); "
                "skipping the update"
            )
            self._step_trained = False
            return {**metrics, **timing, "trainer/untrained_step": 1.0}
        batch = self.prepare_batch(kept)
        # how many samples have someone to be compared with (a group of one: no baseline)
        counts = torch.bincount(batch.index)
        metrics["actor/baseline_shared_frac"] = float((counts[batch.index] > 1).float().mean())
        timing["timing/prepare"] = time.perf_counter() - tic

        # The engine keeps per-row KV caches between turns; free them before the update
        # (the weights are about to change, and on a GPU that memory is needed now).
        self.engine.clear_prefix_cache()
        # one forward per model where the phases allow it (ragen.trainer.onepass)
        data_parallel = self.scale is not None and self.scale.updater is not None
        self._old_from_update = onepass.shares_actor_forward(self.cfg, batch.size, data_parallel)
        critic_pass = self.critic is not None and onepass.shares_critic_forward(
            self.cfg, batch.size, data_parallel
        )
        self._critic_stats = None
        tic = time.perf_counter()
        phases = self.phases()  # this process, or the ranks (trainer.train_ranks > 1)
        if self._old_from_update:  # one process: the update's forward gives the old log-probs
            if critic_pass:  # the critic's update, whose forward gives the values
                self.signals.abandonable = False  # it changes weights: the step finishes
                try:
                    self._critic_stats = self._critic_update_pass(batch, step)
                except NonFiniteUpdate as err:
                    raise self._nonfinite_error(step, batch, str(err), metrics) from None
            elif self.critic is not None:
                self.compute_values(batch)
        else:
            phases.score_batch(batch, metrics)
            timing["timing/old_log_prob"] = time.perf_counter() - tic
        tic = time.perf_counter()
        self.compute_advantages(batch, metrics, estimated=critic_pass)
        if a.advantage_floor is not None:
            metrics.update(floor_advantages(batch, a.advantage_floor))
        if a.pg_min_entropy > 0:
            metrics.update(mask_certain_tokens(batch, a.pg_min_entropy))
        timing["timing/advantage"] = time.perf_counter() - tic
        self._log_trajectories(step, trajectories, keep.tolist(), kept, batch)

        tic = time.perf_counter()
        self.signals.abandonable = False  # from here on the step changes weights: it finishes
        # train_ranks > 1: this same update, data-parallel (ragen.distributed.data_parallel)
        try:
            update_metrics = phases.update(batch, step)
        except NonFiniteUpdate as err:
            raise self._nonfinite_error(step, batch, str(err), metrics) from None
        self._step_trained = True
        metrics.update(update_metrics)
        if self._old_from_update:  # filled by the update's forward
            metrics.update(logprob_agreement(batch))
        timing["timing/update"] = time.perf_counter() - tic
        self.actor_sched.step()
        if self.critic_sched is not None:
            self.critic_sched.step()
        if t.rollout_reuse > 1:
            self._reused = (batch, step)
            metrics["rollout/reuse_age"] = 0.0  # fresh (later steps: how stale)

        timing["timing/step"] = sum(timing.values())
        metrics.update(timing)
        n_train_tokens = float(batch.attention_mask.sum())
        metrics["perf/update_tokens_per_s"] = n_train_tokens / max(timing["timing/update"], 1e-9)
        metrics["perf/rollout_tokens_per_s"] = float(result.stats.get("tokens_per_s", 0.0))
        metrics["perf/num_trained_samples"] = float(len(kept))
        metrics["actor/lr"] = self.actor_sched.get_last_lr()[0]
        return metrics

    def _reuse_step(self, step: int) -> dict[str, float]:
        """Step ``step`` without a rollout (``trainer.rollout_reuse``): one more update on
        the kept samples of the last fresh rollout, with its advantages and behaviour
        log-probs, so the data is ``rollout/reuse_age`` updates stale. No rollout, filter
        or reasoning metrics are logged for such a step."""
        batch, fresh = self._reused
        self.signals.abandonable = False  # the update changes weights: it finishes
        tic = time.perf_counter()
        updater = self.scale.updater if self.scale is not None else None
        try:
            metrics = dict((updater or self).update(batch, step))
        except NonFiniteUpdate as err:
            raise self._nonfinite_error(step, batch, str(err), {}) from None
        self._step_trained = True
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
                "actor/lr": self.actor_sched.get_last_lr()[0],
            }
        )
        return metrics

    def _log_trajectories(self, step, trajectories, keep, kept=(), batch=None) -> None:
        """Write step ``step + 1``'s episodes (bounded; ``ragen.trainer.trajectory_log``)
        with the filter's verdict and, for the ``kept`` samples in ``batch``, the mean
        advantage each turn is trained with."""
        from .trajectory_log import episode_records, should_log, turn_advantages

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

    def reasoning_stats(self, trajectories: list[Trajectory], step: int) -> dict[str, float]:
        from .reasoning_stats import reasoning_stats

        if is_processor(self.tokenizer):  # cross-prompt scoring does not carry pictures yet
            return {}

        with self.autocast:
            return reasoning_stats(
                self.actor,
                self.tokenizer,
                trajectories,
                self.cfg.trainer.reasoning_samples,
                self.pad_id,
                self.cfg.rollout.temperature,
                self.device,
                seed=derive_seed(self.cfg.trainer.seed, "reasoning_stats", step),
            )

    # -- batch preparation -----------------------------------------------------------
    def prepare_batch(self, trajectories: list[Trajectory]) -> TrainingBatch:
        """Pad, normalize scores, place rewards; everything on ``self.device``.

        A sample's score is its reward-to-go (the episode reward for a full-history
        sample; from its own turn on for a windowed one, later turns discounted by
        ``algo.window_gamma``), and its baseline group is :func:`baseline_groups`.
        """
        a = self.cfg.algo
        batch = collate(trajectories, self.pad_id)
        scores = torch.tensor(
            [tr.discounted_reward_to_go(a.window_gamma) for tr in trajectories],
            dtype=torch.float32,
        )
        batch.index = baseline_groups(trajectories, a.turn_baseline)
        if a.reward_placement == "trajectory":
            scores = algo.normalize_scores(
                scores, batch.index, grouping=a.norm_grouping, method=a.norm_method
            )
        batch.token_level_scores = place_rewards(
            trajectories, scores, tuple(batch.input_ids.shape), a.reward_placement
        )
        # the critic bootstraps V(s_end) where the return continues past the sample's end
        # (env-side truncation, context overflow; the budgets when not terminal)
        batch.bootstrap_mask = torch.tensor(
            [float(tr.continues_after_end(a.budget_is_terminal)) for tr in trajectories]
        )
        batch.advantage_mask = batch.response_mask.clone()
        if a.advantage_tokens == "response_and_turn_end":
            for i, tr in enumerate(trajectories):
                if tr.turn_close_mask:
                    close = torch.tensor(tr.turn_close_mask, dtype=torch.float)
                    batch.advantage_mask[i, : len(close)] += close
        return batch.to(self.device)

    def vision_inputs(self, mb: TrainingBatch) -> dict[str, Any]:
        """Pixel inputs of a micro-batch's pictures (empty for text rows): the model's own
        image processor on the same pictures generation saw, plus M-RoPE position ids for
        the Qwen2-VL family (``ragen.models.vlm.forward_inputs``)."""
        if not mb.images or not any(mb.images):
            return {}
        dtype = next(self.actor.parameters()).dtype
        images = row_images(mb.images)
        return forward_inputs(
            self.actor, self.tokenizer, mb.input_ids, mb.attention_mask, images, dtype
        )

    def _micro_batches(self, batch: TrainingBatch, rows: Sequence[int] | None = None):
        """``(row_ids, micro_batch)`` pairs within ``algo.micro_token_budget``."""
        rows = range(batch.size) if rows is None else rows
        # an explicit budget as configured; auto (0) as resolved once at the start, so the
        # micro-batches never depend on how much memory happens to be free mid-run
        budget = self.cfg.algo.micro_token_budget or self.token_budget
        return micro_batches(batch, rows, budget)

    def score_batch(self, batch: TrainingBatch, metrics: dict[str, float]) -> None:
        """The batch's scores before advantages: old (and reference) log-probs, and the
        critic's values when there is a critic."""
        self.compute_old_log_probs(batch, metrics)
        if self.critic is not None:
            self.compute_values(batch)

    @torch.no_grad()
    def compute_old_log_probs(self, batch: TrainingBatch, metrics: dict[str, float]) -> None:
        """old_log_prob (and ref_log_prob when KL is on), recomputed by the training model."""
        temperature = self.cfg.rollout.temperature
        old = torch.zeros_like(batch.response_mask)
        ref = torch.zeros_like(old) if self.cfg.algo.kl_coef > 0 else None
        want_entropy = self.cfg.algo.pg_min_entropy > 0
        ent = torch.zeros_like(old) if want_entropy else None
        self.actor.eval()
        for rows, mb in self._micro_batches(batch):
            L = mb.input_ids.shape[1]
            with self.autocast:
                lp, h = token_log_probs(
                    self.actor,
                    mb.input_ids,
                    mb.attention_mask,
                    temperature,
                    mb.response_mask,
                    with_entropy=want_entropy,
                    **self.vision_inputs(mb),
                )
                old[rows, :L] = lp
                if ent is not None:
                    ent[rows, :L] = h
                if ref is not None:
                    ref[rows, :L] = self._ref_log_probs(mb, temperature)
        batch.old_log_prob, batch.ref_log_prob, batch.old_entropy = old, ref, ent
        metrics.update(logprob_agreement(batch))

    def _ref_log_probs(self, mb: TrainingBatch, temperature: float) -> torch.Tensor:
        args = (mb.input_ids, mb.attention_mask, temperature, mb.response_mask)
        vision = self.vision_inputs(mb)
        if self.use_lora:
            # the reference is the base model: the same weights with the adapters off
            with self.actor.disable_adapter():
                return token_log_probs(self.actor, *args, **vision)[0]
        return token_log_probs(self.ref, *args, **vision)[0]

    @torch.no_grad()
    def compute_values(self, batch: TrainingBatch) -> None:
        """``batch.values``: the critic's V(prefix before token t) on the advantage mask
        (the response tokens, plus turn-close tokens under M_adv), and
        ``batch.final_values``: V of each whole row, the bootstrap value."""
        values = torch.zeros_like(batch.response_mask)
        final = torch.zeros(batch.size, device=values.device)
        self.critic.eval()
        for rows, mb in self._micro_batches(batch):
            with self.autocast:
                v, f = token_values(
                    self.critic,
                    mb.input_ids,
                    mb.attention_mask,
                    mb.advantage_mask,
                    **self.vision_inputs(mb),
                )
            values[rows, : mb.input_ids.shape[1]] = v
            final[rows] = f
        batch.values = values * batch.advantage_mask
        batch.final_values = final

    def compute_advantages(
        self, batch: TrainingBatch, metrics: dict[str, float], estimated: bool = False
    ) -> None:
        """Advantages and returns by the configured estimator, then whitening, the masks
        and their metrics. ``estimated``: ``batch.advantages``/``returns`` already hold
        the estimator's output (the critic's one-pass update ran it per micro-batch)."""
        a = self.cfg.algo
        rewards = batch.token_level_scores
        mask = batch.response_mask
        if a.kl_coef > 0 and a.kl_in_reward:
            kl = algo.kl_penalty(batch.old_log_prob, batch.ref_log_prob, a.kl_type)
            rewards = algo.apply_kl_to_rewards(rewards, kl, mask, a.kl_coef)
            metrics["actor/reward_kl"] = float(algo.masked_mean(kl, mask))
        batch.token_level_rewards = rewards
        if estimated:
            advantages, returns = batch.advantages, batch.returns
        else:
            advantages, returns = self._estimate(batch, rewards)
        if a.whiten_advantages:
            advantages = algo.masked_whiten(advantages, mask)
        # the policy trains on sampled ids (M_loss); the critic fits returns wherever the
        # recursion ran (M_adv), so turn-close values are learned, not left at init
        batch.advantages = advantages * mask
        batch.returns = returns * batch.advantage_mask
        metrics["actor/advantage_mean"] = float(algo.masked_mean(advantages, mask))
        metrics["actor/advantage_abs_max"] = float((advantages.abs() * mask).max())
        metrics["actor/bootstrapped_frac"] = float(batch.bootstrap_mask.mean())
        if batch.values is not None:
            metrics["critic/explained_variance"] = float(
                algo.explained_variance(batch.values, batch.returns, batch.advantage_mask)
            )
            metrics["critic/value_mean"] = float(algo.masked_mean(batch.values, mask))

    def _estimate(self, batch: TrainingBatch, rewards: torch.Tensor | None = None):
        """``(advantages, returns)`` of the configured estimator on ``batch`` (rewards:
        its token-level rewards, default the scores)."""
        a = self.cfg.algo
        estimator = algo.get_advantage_estimator(a.adv_estimator)
        return estimator(
            token_level_rewards=batch.token_level_scores if rewards is None else rewards,
            response_mask=batch.response_mask,
            values=batch.values,
            index=batch.index,
            turn_end_mask=batch.turn_end_mask,
            advantage_mask=batch.advantage_mask,
            bootstrap_value=(
                None if batch.final_values is None else batch.final_values * batch.bootstrap_mask
            ),
            gamma=a.gamma,
            lam=a.lam,
            gamma_turn=a.gamma_turn,
            lam_turn=a.lam_turn,
            gamma_token=a.gamma_token,
            lam_token=a.lam_token,
        )

    def _critic_update_pass(self, batch: TrainingBatch, step: int) -> dict[str, float]:
        """The critic's update on the whole batch (one minibatch, the micro-batches the
        update would use), its forward giving the values, advantages and returns of each
        micro-batch as it goes (``ragen.trainer.onepass``). Returns its update metrics."""
        rows = self._minibatch_order(step, batch.size)
        targets = onepass.CriticTargets(batch, self._estimate)
        return self._critic_minibatch(batch, rows, self._micro_batches(batch, rows), targets)

    def _minibatch_order(self, step: int, size: int, generator=None) -> list[int]:
        """The shuffled row order of an epoch of step ``step`` (the first epoch's without
        ``generator``)."""
        if generator is None:
            generator = self._minibatch_generator(step)
        return torch.randperm(size, generator=generator).tolist()

    def _minibatch_generator(self, step: int) -> torch.Generator:
        return torch.Generator().manual_seed(derive_seed(self.cfg.trainer.seed, "minibatch", step))

    # -- the update ------------------------------------------------------------------
    def update(self, batch: TrainingBatch, step: int) -> dict[str, float]:
        """``ppo_epochs`` passes over shuffled minibatches; each minibatch is one optimizer
        step with gradients accumulated over token-budget micro-batches. A critic that
        already took its step (``_critic_update_pass``) is not trained again."""
        a = self.cfg.algo
        B = batch.size
        lengths = batch.lengths.tolist()
        gen = self._minibatch_generator(step)
        sums: dict[str, list[float]] = defaultdict(list)
        critic_stats = getattr(self, "_critic_stats", None)
        for k, v in (critic_stats or {}).items():
            sums[k].append(v)
        pad_fracs = []
        for _epoch in range(a.ppo_epochs):
            perm = self._minibatch_order(step, B, gen)
            for start in range(0, B, a.ppo_mini_batch_size):
                rows = perm[start : start + a.ppo_mini_batch_size]
                micros = self._micro_batches(batch, rows)
                pad_fracs.append(padding_fraction(lengths, [ids for ids, _ in micros]))
                for k, v in self._actor_minibatch(batch, rows, micros).items():
                    sums[k].append(v)
                if self.critic is not None and critic_stats is None:
                    for k, v in self._critic_minibatch(batch, rows, micros).items():
                        sums[k].append(v)
        out = {}
        for k, values in sums.items():
            if k.endswith("grad_norm"):
                finite = [v for v in values if math.isfinite(v)]
                out[f"{k}_mean"] = float(np.mean(finite)) if finite else float("nan")
                out[f"{k}_max"] = float(np.max(values))
            elif k.endswith("skipped_steps"):
                out[k] = float(np.sum(values))
            else:
                out[k] = float(np.mean(values))
        out["perf/padding_fraction"] = float(np.mean(pad_fracs))
        return out

    @property
    def loss_norm_constant(self) -> int:
        """Dr.GRPO's fixed normalizer (``seq-mean-token-sum-norm``): ``algo.loss_norm_constant``,
        or the response budget of one sample, max_new_tokens x the turns a sample holds."""
        a, r = self.cfg.algo, self.cfg.rollout
        if a.loss_norm_constant is not None:
            return int(a.loss_norm_constant)
        return r.max_new_tokens * (r.max_turns if r.context_window is None else 1)

    def _denominator(self, mask: torch.Tensor) -> float:
        """The minibatch-wide denominator of the loss over ``mask`` (rows x T): every
        micro-batch divides by it, so their losses add up to the minibatch loss in every
        ``loss_agg_mode`` (``ragen.algo.losses.agg_denominator``)."""
        a = self.cfg.algo
        return algo.agg_denominator(mask, a.loss_agg_mode, self.loss_norm_constant)

    def _optimizer_step(self, model, optimizer, prefix: str) -> dict[str, float]:
        a = self.cfg.algo
        params = [p for p in model.parameters() if p.requires_grad]
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, a.grad_clip))
        if not math.isfinite(grad_norm):
            # NaN/inf never reaches the weights, and never passes silently: the step
            # stops here and train_step saves its data (ragen.trainer.nonfinite)
            optimizer.zero_grad(set_to_none=True)
            seen, self._nonfinite_loss = self._nonfinite_loss, ""
            raise NonFiniteUpdate(seen or f"the {prefix}'s gradient norm is {grad_norm}")
        skip = a.skip_grad_norm_above is not None and grad_norm > a.skip_grad_norm_above
        if skip:
            # VAGEN-style safety: an exploding gradient skips the step (logged as
            # <prefix>/skipped_steps) instead of wrecking the weights.
            optimizer.zero_grad(set_to_none=True)
        else:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return {f"{prefix}/grad_norm": grad_norm, f"{prefix}/skipped_steps": float(skip)}

    def _actor_minibatch(self, batch: TrainingBatch, rows: list[int], micros) -> dict[str, float]:
        """One optimizer step on minibatch ``rows``, accumulated over ``micros``."""
        a = self.cfg.algo
        temperature = self.cfg.rollout.temperature
        mode, norm = a.loss_agg_mode, self.loss_norm_constant
        denom = self._denominator(batch.response_mask[rows])
        total_tokens = float(batch.response_mask[rows].sum()) or 1.0
        self.actor.train()
        stats: dict[str, float] = defaultdict(float)
        old_from_update = getattr(self, "_old_from_update", False)
        if old_from_update and batch.old_log_prob is None:
            batch.old_log_prob = torch.zeros_like(batch.response_mask)
        for ids, mb in micros:
            mask = mb.response_mask
            share = float(mask.sum()) / total_tokens  # this micro-batch's share of tokens
            with self.autocast:
                log_prob, entropy = token_log_probs(
                    self.actor,
                    mb.input_ids,
                    mb.attention_mask,
                    temperature,
                    mask,
                    with_entropy=True,
                    **self.vision_inputs(mb),
                )
            if old_from_update:  # the policy before this step is the one computing log_prob
                mb.old_log_prob = log_prob.detach().float()
                batch.old_log_prob[ids, : mask.shape[1]] = mb.old_log_prob
            pg_loss, pg_metrics = algo.get_policy_loss(a.policy_loss)(
                old_log_prob=mb.old_log_prob,
                log_prob=log_prob,
                advantages=mb.advantages,
                response_mask=mask,
                clip_ratio_low=a.clip_ratio_low,
                clip_ratio_high=a.clip_ratio_high,
                clip_ratio_c=a.clip_ratio_c,
                loss_agg_mode=mode,
                norm_constant=norm,
                denominator=denom,
            )
            entropy_term = algo.agg_loss(entropy, mask, mode, norm, denominator=denom)
            loss = pg_loss - a.entropy_coef * entropy_term
            if a.kl_coef > 0 and not a.kl_in_reward:
                kl = algo.kl_penalty(log_prob, mb.ref_log_prob, a.kl_type)
                kl_term = algo.agg_loss(kl, mask, mode, norm, denominator=denom)
                loss = loss + a.kl_coef * kl_term
                stats["actor/kl_loss"] += float(kl_term.detach())
            problem = nonfinite_loss(loss, "actor loss", self.actor)
            if problem:  # no backward; _optimizer_step stops the step
                self._nonfinite_loss = self._nonfinite_loss or problem
                if self._collective_backward:
                    loss.backward()
                continue
            loss.backward()
            # losses are parts of the minibatch loss already: they add up
            stats["actor/pg_loss"] += float(pg_loss.detach())
            stats["actor/entropy_loss"] += float(entropy_term.detach())
            # the logged entropy is a plain token mean whatever the loss aggregation, so
            # curves of algorithms with different loss_agg_mode compare directly
            stats["actor/entropy"] += float((entropy.detach() * mask).sum()) / total_tokens
            for k, v in pg_metrics.items():  # token means within the micro-batch
                stats[f"actor/{k}"] += share * float(v)
        stats.update(self._optimizer_step(self.actor, self.actor_opt, "actor"))
        return dict(stats)

    def _critic_minibatch(
        self, batch: TrainingBatch, rows: list[int], micros, targets=None
    ) -> dict[str, float]:
        """One critic optimizer step on minibatch ``rows``: the value loss over the tokens
        the advantage recursion ran on (``advantage_mask``). ``targets``: called with each
        micro-batch's detached values before its loss, to set its ``values`` and
        ``returns`` from them (``ragen.trainer.onepass.CriticTargets``)."""
        a = self.cfg.algo
        mode, norm = a.loss_agg_mode, self.loss_norm_constant
        denom = self._denominator(batch.advantage_mask[rows])
        total_tokens = float(batch.advantage_mask[rows].sum()) or 1.0
        self.critic.train()
        stats: dict[str, float] = defaultdict(float)
        for ids, mb in micros:
            with self.autocast:
                vpreds, final = token_values(
                    self.critic,
                    mb.input_ids,
                    mb.attention_mask,
                    mb.advantage_mask,
                    **self.vision_inputs(mb),
                )
            if targets is not None:
                targets(ids, mb, vpreds.detach(), final.detach())
            loss, v_metrics = algo.value_loss(
                vpreds=vpreds,
                returns=mb.returns,
                old_values=mb.values,
                response_mask=mb.advantage_mask,
                cliprange_value=a.value_clip,
                loss_agg_mode=mode,
                norm_constant=norm,
                denominator=denom,
            )
            problem = nonfinite_loss(loss, "critic's value loss", self.critic)
            if problem:  # no backward; _optimizer_step stops the step
                self._nonfinite_loss = self._nonfinite_loss or problem
                if self._collective_backward:
                    loss.backward()
                continue
            loss.backward()
            stats["critic/value_loss"] += float(loss.detach())
            share = float(mb.advantage_mask.sum()) / total_tokens
            for k, v in v_metrics.items():
                stats[f"critic/{k}"] += share * float(v)
        stats.update(self._optimizer_step(self.critic, self.critic_opt, "critic"))
        return dict(stats)

    # -- validation ------------------------------------------------------------------
    def validate(self, step: int) -> dict[str, float]:
        from ragen.agent.metrics import rollout_metrics

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
            from .trajectory_log import episode_records

            records = episode_records(result.trajectories)
            self.logger.log_trajectories(step + 1, records, kind="val_step")
        out["timing/validation"] = time.perf_counter() - tic
        return out


def train(cfg: TrainConfig, argv: Sequence[str] | None = None) -> list[dict[str, float]]:
    """Run a whole training job from a resolved config (``argv``: see :class:`StarPOTrainer`)."""
    return StarPOTrainer(cfg, argv=argv).train()
