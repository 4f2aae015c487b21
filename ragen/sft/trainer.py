"""Supervised warm start on expert trajectories (``ragen sft``).

The data are oracle rollouts tokenized by the SAME context machinery as RL rollouts
(same system prompt, same per-turn user messages, same ``<think>/<answer>`` format), so
the loss mask is exactly the assistant tokens, as in RL:

    loss = - sum_{t : response_mask_t = 1} log p(x_t | x_<t) / sum_t response_mask_t

(token-mean over the whole batch). Full fine-tuning or LoRA (PEFT); the output is an
HF-format model folder that ``ragen train model=PATH`` and ``ragen eval --model PATH`` load.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from ragen import disk_space
from ragen.agent.env_manager import EnvStateManager
from ragen.agent.policies import OraclePolicy, RelabeledPolicy
from ragen.agent.rollout import RolloutConfig, run_rollout
from ragen.agent.trajectory import Trajectory
from ragen.errors import ConfigError, DiskFullError, NonFiniteError, UsageError
from ragen.models import load_policy
from ragen.models.attention import training_attention
from ragen.models.finite import check_finite_weights
from ragen.models.hf_setup import quiet_transformers
from ragen.models.logprobs import sequence_logprobs, wanted_logits
from ragen.models.memory import resolve_token_budget
from ragen.models.precision import autocast_for
from ragen.models.vlm import forward_inputs, is_processor, row_images, text_tokenizer
from ragen.sft.state_success import training_state_success
from ragen.trainer.batching import TrainingBatch, collate, micro_batches
from ragen.trainer.config import LoraConfig
from ragen.trainer.nonfinite import NONFINITE_DIR, nonfinite_loss, save_step_data
from ragen.trainer.setup import apply_lora

SFT_SEED_STEP = 10_000_000  # the training-seed step SFT's expert episodes start from
SFT_HELDOUT_STEP = 10_000_001  # ... and the step of the held-out slice (never trained on)
SFT_LABELS = ("expert", "played")
# a micro-batch holds rows of at least this share of its longest: the grids' SFT mixes
# ~110-token move samples with ~170-token auxiliary replies, and one pack of both pads
# every move to 170 (the loss is summed over tokens, so the split changes no gradient)
SFT_MIN_FILL = 0.75
# a time budget times optimizer steps WARMUP_STEPS+1 .. BUDGET_PROBE_STEPS (the first ones
# pay one-off costs: kernel selection, CUDA context, caches) before shortening the schedule
#: training samples the fit check scores (``SFTConfig.fit_check``)
FIT_CHECK_SAMPLES = 256

#: the wall clock the time budget reads (a test replaces it with a fake one)
_clock = time.perf_counter

BUDGET_WARMUP_STEPS = 5
BUDGET_PROBE_STEPS = 25


@dataclass
class SFTConfig:
    env: str = "sokoban"  # a registered environment (``ragen envs``)
    env_config: dict = field(default_factory=dict)  # the env's own knobs
    # how the expert episodes are played and prompted: max_turns, max_actions_per_turn,
    # think, prompt_style, context_window must match the RL run's rollout.* (its
    # env_groups/group_size/sampling knobs are unused here)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    episodes: int = 512  # expert episodes generated
    # fraction of the moves played while generating that are random instead of the
    # expert's: the states visited then include the mistakes a learner makes
    epsilon: float = 0.0
    # what a turn is trained to answer. "expert": the solver's move in the state the
    # episode is in, whatever was played (DAgger's labels; a random move is never a
    # target; needs rollout.context_window=0 when epsilon > 0, since the recorded reply
    # then differs from the move that ran). "played": the move that ran, random or not
    # (teaches the reply format alone when epsilon is 1, as the bandit's warm start does)
    labels: str = "expert"
    actions_per_turn: int = 1  # expert actions per response (<= rollout.max_actions_per_turn)
    seed: int = 0
    epochs: int = 2
    batch_size: int = 32  # sequences per optimizer step
    # padded tokens per forward/backward micro-batch. 4096 pads Sokoban expert data 9%
    # (16384: 20%) and ran an epoch 1.3-1.4x faster with the same losses, but in one
    # demo-length run the grid phase change came later; kept at 16384 until measured on
    # more seeds
    # 0 (auto): 16384, or the power of two below what fits in free memory when less
    # (ragen.models.memory)
    micro_token_budget: int = 0
    lr: float = 5e-4
    # linear warm-up over this fraction of the optimizer steps, then cosine decay to 10%
    warmup_frac: float = 0.0
    weight_decay: float = 0.0
    # AdamW's second-moment decay. 0.95 (as in most LLM pretraining) adapts the step
    # size faster than PyTorch's 0.999 when the gradient scale changes, as it does when
    # a from-scratch model leaves its loss plateau
    adam_beta2: float = 0.999
    # expert episodes (from validation-disjoint training states, apart from the training
    # data) whose loss and per-token accuracy are measured after every epoch: does the
    # warm start fit what it was taught? 0 = no held-out slice
    heldout_episodes: int = 0
    # an auxiliary reply format also trained on (e.g. "grounding": the expert first states
    # the facts of the state, player and goal by coordinates), on aux_episodes more
    # episodes: a dense target for reading the grid that the model's own format
    # (rollout.reasoning, what RL and evaluation play) shares its circuits with
    aux_reasoning: str | None = None
    aux_episodes: int = 0
    # A from-scratch model either leaves its loss plateau (predicting the most common
    # move) or stays on it, depending on its random init. With fit_check > 0 the fit is
    # checked once that fraction of the optimizer steps has run: the greedy reply must
    # match the expert's on at least fit_min_reply_accuracy of a slice of the training
    # data (never the validation states), else a from-scratch tiny model is drawn again
    # with a new init seed and trained from the start, at most fit_restarts times. A
    # pretrained model is never re-drawn: a failed check is logged and training goes on
    fit_check: float = 0.0
    fit_min_reply_accuracy: float = 0.5
    fit_restarts: int = 0
    # wall-clock budget of the optimizer steps (None: every epoch): after the first
    # steps the schedule is shortened to the steps that fit, so warm-up and decay still
    # run their course
    max_seconds: float | None = None
    # stop once the model solves this share of its own SFT states (0: train every
    # epoch). A warm start chosen on training data, never on validation states, to sit
    # below what RL can reach: checked every success_check_every optimizer steps on the
    # first success_check_episodes SFT states at success_check_temperature (the
    # evaluation's). ragen/sft/state_success.py
    stop_at_success: float = 0.0
    success_check_every: int = 20
    success_check_episodes: int = 128
    success_check_temperature: float = 0.5
    lora_rank: int = 0  # 0 = full fine-tuning
    lora_alpha: int = 16
    only_successful: bool = False  # keep only episodes the (noisy) expert solved
    # forward + backward under bf16 autocast on a CPU with bf16 instructions (weights,
    # grads and AdamW stay float32; a no-op elsewhere: ragen.models.precision). On the
    # dev CPU (avx512_bf16) 1.4x faster, the same loss for 16 steps, but in the demo's
    # 1,032-step Sokoban warm start the loss plateau lasted longer, so it is off by
    # default
    bf16: bool = False

    def validate(self) -> None:
        """Raise :class:`~ragen.errors.ConfigError` naming the option and the fix."""
        self.rollout.validate(prefix="rollout.")
        if not 1 <= self.actions_per_turn <= self.rollout.max_actions_per_turn:
            raise ConfigError(
                f"actions_per_turn={self.actions_per_turn} must be between 1 and "
                f"rollout.max_actions_per_turn={self.rollout.max_actions_per_turn} (the limit "
                "the prompt states). Fix: raise --max-actions-per-turn or lower --actions-per-turn"
            )
        for name in ("episodes", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.micro_token_budget < 0:
            raise ConfigError(
                f"micro_token_budget: padded tokens per micro-batch must be >= 0, got "
                f"{self.micro_token_budget}. Fix: e.g. 8192, or 0 (what fits in the free memory)"
            )
        if self.lora_rank < 0:  # it silently meant full fine-tuning (issue 55)
            raise ConfigError(
                f"lora_rank: must be >= 0 (0: full fine-tuning; N > 0: LoRA adapters of rank "
                f"N), got {self.lora_rank}. Fix: e.g. --lora-rank 8, or --lora-rank 0"
            )
        # `not a <= x` style checks: NaN fails them too (an inf/NaN lr trains NaN weights)
        if not 0 < self.lr < math.inf:
            raise ConfigError(
                f"lr: the learning rate must be a finite number > 0, got {self.lr}. "
                "Fix: e.g. --lr 5e-4 (the default)"
            )
        if not 0 <= self.fit_check < 1:
            raise ConfigError(
                f"fit_check: the share of the optimizer steps after which the fit is "
                f"checked must be in [0, 1), got {self.fit_check}. Fix: e.g. 0.5, or 0 (off)"
            )
        if not 0 <= self.fit_min_reply_accuracy <= 1 or self.fit_restarts < 0:
            raise ConfigError(
                f"fit_min_reply_accuracy must be in [0, 1] (got {self.fit_min_reply_accuracy}) "
                f"and fit_restarts >= 0 (got {self.fit_restarts}). Fix: e.g. 0.5 and 2"
            )
        if not 0 < self.adam_beta2 < 1:
            raise ConfigError(
                f"adam_beta2: must be in (0, 1), got {self.adam_beta2}. Fix: e.g. 0.95 or 0.999"
            )
        if not 0 <= self.weight_decay < math.inf:
            raise ConfigError(
                f"weight_decay: must be a finite number >= 0, got {self.weight_decay}. "
                "Fix: 0 turns it off"
            )
        if not 0 <= self.epsilon <= 1:
            raise ConfigError(
                f"epsilon: the share of expert actions made random must be in [0, 1], got "
                f"{self.epsilon}. Fix: e.g. --epsilon 0.1 (0: the expert's own actions)"
            )
        if self.labels not in SFT_LABELS:
            raise ConfigError(
                f"labels={self.labels!r} is not one of {', '.join(SFT_LABELS)}. Fix: labels=expert "
                "(the solver's move in every visited state) or labels=played (the move that ran)"
            )
        if self.labels == "expert" and self.epsilon > 0 and self.rollout.context_window != 0:
            raise ConfigError(
                f"labels=expert with epsilon={self.epsilon} needs rollout.context_window=0: "
                "each turn's reply is the expert's move while a random move may have run, so "
                "a sample that shows earlier replies would show moves that did not happen. "
                "Fix: --context-window 0 (each turn prompted with the current state alone; "
                "train the RL run on the same prompts with rollout.context_window=0), or "
                "--labels played, or --epsilon 0"
            )
        if not 0.0 <= self.warmup_frac < 1.0:
            raise ConfigError(f"warmup_frac must be in [0, 1), got {self.warmup_frac}")
        if self.max_seconds is not None and not 0 < self.max_seconds < float("inf"):
            raise ConfigError(f"max_seconds must be null or a number > 0, got {self.max_seconds}")
        if self.aux_reasoning is not None:
            from ragen.agent.reasoning import REASONING_FORMATS

            if self.aux_reasoning not in REASONING_FORMATS:
                raise ConfigError(
                    f"aux_reasoning={self.aux_reasoning!r} is not a reply format; use one of "
                    f"{', '.join(REASONING_FORMATS)}"
                )
        if not 0 <= self.stop_at_success <= 1:
            raise ConfigError(
                f"stop_at_success: a share of the SFT states solved, in [0, 1], got "
                f"{self.stop_at_success}. Fix: e.g. 0.4, or 0 (train every epoch)"
            )
        if self.stop_at_success and (
            self.success_check_every < 1 or self.success_check_episodes < 1
        ):
            raise ConfigError(
                "success_check_every and success_check_episodes must be >= 1 with "
                f"stop_at_success (got {self.success_check_every}, "
                f"{self.success_check_episodes}). Fix: e.g. 20 and 128"
            )
        if not 0 <= self.success_check_temperature < math.inf:
            raise ConfigError(
                f"success_check_temperature must be a finite number >= 0, got "
                f"{self.success_check_temperature}. Fix: e.g. 0.5 (the evaluation's)"
            )
        if self.aux_episodes < 0:
            raise ConfigError(f"aux_episodes must be >= 0, got {self.aux_episodes}")
        if self.heldout_episodes < 0:
            raise ConfigError(f"heldout_episodes must be >= 0, got {self.heldout_episodes}")


class SFTPlateau(Exception):
    """The fit check failed on a model that may be drawn again (:func:`run_sft`)."""

    def __init__(self, step: int, reply_accuracy: float):
        super().__init__(f"reply accuracy {reply_accuracy:.3f} after {step} steps")
        self.step, self.reply_accuracy = step, reply_accuracy


def make_expert_data(
    tokenizer, cfg: SFTConfig, split: str = "train", behavior=None
) -> list[Trajectory]:
    """Oracle rollouts (with ``epsilon`` noise) as token-exact samples, on training states
    (``split="train"``, what SFT trains on), on other training states kept apart from
    them (``split="heldout"``: the slice that measures fit, ``cfg.heldout_episodes``
    episodes) or on the held-out validation states (``split="validation"``: expert
    answers to probe a model on states it never saw; never train on these).

    With ``cfg.labels == "expert"`` every target is the solver's move in the state the
    episode is in (:class:`~ragen.agent.policies.RelabeledPolicy`): the noisy expert, or
    ``behavior`` (a :class:`~ragen.agent.policies.Policy`, e.g. the learner: DAgger),
    picks the moves that run; turns the solver cannot answer are dropped.
    """
    if split not in ("train", "heldout", "validation"):
        raise UsageError(f"split must be train, heldout or validation, got {split!r}")
    cfg.validate()

    episodes = cfg.heldout_episodes if split == "heldout" else cfg.episodes
    if episodes < 1:
        raise UsageError(f"no {split} episodes to make (heldout_episodes={episodes})")
    manager = EnvStateManager(
        cfg.env, dict(cfg.env_config), env_groups=episodes, group_size=1, seed=cfg.seed
    )
    relabel = cfg.labels == "expert" and (cfg.epsilon > 0 or behavior is not None)
    if behavior is not None and not relabel:
        raise UsageError("a behavior policy needs labels=expert (its moves are not targets)")
    policy = OraclePolicy(
        actions_per_turn=cfg.actions_per_turn,
        epsilon=0.0 if relabel else cfg.epsilon,
        seed=cfg.seed,
        tokenizer=tokenizer,
    )
    if relabel:
        if behavior is None:
            behavior = OraclePolicy(cfg.actions_per_turn, cfg.epsilon, seed=cfg.seed + 1)
        policy = RelabeledPolicy(label=policy, behavior=behavior)
    # SFT episodes are training states (never validation states), drawn as steps that
    # no RL run reaches
    if split == "train":
        seeds = manager.seeds_for_step(SFT_SEED_STEP)
    elif split == "heldout":
        seeds = manager.seeds_for_step(SFT_HELDOUT_STEP)
    else:
        seeds = manager.validation_seeds(episodes)
    result = run_rollout(policy, manager, replace(cfg.rollout, seed=cfg.seed), seeds)
    data = [t for t in result.trajectories if t.num_response_tokens > 0]
    if relabel:  # drop the turns the solver had no answer for (their reply is random)
        data = [t for t in data if _expert_labelled(t)]
    if cfg.only_successful:
        data = [t for t in data if t.success]
    if not data:
        raise UsageError(
            f"no expert trajectories for env {cfg.env!r}: the expert solved none of "
            f"{cfg.episodes} episodes. Fix: only_successful=false, or a lower epsilon"
        )
    return data


def auxiliary_config(cfg: SFTConfig) -> SFTConfig:
    """The config of the auxiliary data: ``cfg`` with the auxiliary reply format, its own
    episode count and other training states (a seed no other data uses)."""
    rollout = replace(cfg.rollout, reasoning=cfg.aux_reasoning)
    return replace(
        cfg, rollout=rollout, episodes=cfg.aux_episodes, seed=cfg.seed + 7919,
        aux_reasoning=None, aux_episodes=0, heldout_episodes=0,
    )  # fmt: skip


def _expert_labelled(t: Trajectory) -> bool:
    """Whether every reply in sample ``t`` is the solver's own answer to its state."""
    windowed = t.reward_from_turn is not None  # one turn's reply per sample
    turns = t.turns[t.turn_index : t.turn_index + 1] if windowed else t.turns
    return all(turn.info.get("expert_label", True) for turn in turns)


def sft_loss(model, batch: TrainingBatch, processor=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed negative log-likelihood over response tokens and their count.

    batch tensors are (B, T); the LM head runs only where a response token is predicted
    (``sequence_logprobs`` with ``positions=response_mask``). A VLM's rows carry their
    pictures (``batch.images``): ``processor`` turns them into pixel inputs.
    """
    vision = {}
    if batch.images and processor is not None:  # pixels (+ Qwen2-VL's M-RoPE positions)
        dtype = next(model.parameters()).dtype
        images = row_images(batch.images)
        vision = forward_inputs(
            model, processor, batch.input_ids, batch.attention_mask, images, dtype
        )
    mask = batch.response_mask
    with training_attention(model):  # on the CPU: GQA's K/V heads read in place
        log_prob, _ = sequence_logprobs(
            model, batch.input_ids, batch.attention_mask, positions=mask, **vision
        )
    return -(log_prob * mask).sum(), mask[:, 1:].sum()


def train_sft(
    model,
    tokenizer,
    data: list[Trajectory],
    cfg: SFTConfig,
    log=print,
    heldout: list[Trajectory] | None = None,
    on_epoch=None,
    dump_dir: str | Path | None = None,
    restartable: bool = False,
) -> list[dict]:
    """Train ``model`` in place on ``data``; returns per-step metrics.

    ``restartable``: a failed fit check (``cfg.fit_check``) raises :class:`SFTPlateau`
    (the caller draws the model again); otherwise it is logged and training goes on.

    ``heldout``: expert samples never trained on; after every epoch their loss and
    accuracy (:func:`sft_fit`) join that epoch's last record as ``heldout_*``, and the
    training data's own are measured on a same-sized slice of it (``train_*``), so a
    warm start that does not fit what it was taught shows it. ``on_epoch(model,
    tokenizer, epoch)``
    may return more metrics for that record (say, success on the SFT states).

    A NaN/inf loss or gradient stops training before that optimizer step with a
    :class:`~ragen.errors.NonFiniteError`; with ``dump_dir`` the step's batch is saved in
    ``dump_dir/nonfinite/step_N`` first (``ragen.trainer.nonfinite``).
    """
    device = next(model.parameters()).device
    processor = tokenizer if is_processor(tokenizer) else None  # a VLM: pixels too
    text_tok = text_tokenizer(tokenizer)
    pad_id = text_tok.pad_token_id if text_tok.pad_token_id is not None else text_tok.eos_token_id
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params, lr=cfg.lr, betas=(0.9, cfg.adam_beta2), weight_decay=cfg.weight_decay
    )
    rng = random.Random(cfg.seed)
    order = list(range(len(data)))
    steps_per_epoch = math.ceil(len(data) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    plan = {"total": total}  # shortened once when a time budget will not fit every step
    sched = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: sft_lr_factor(s, plan["total"], cfg.warmup_frac)
    )
    autocast = autocast_for(device, cfg.bf16)
    budget = resolve_token_budget(
        model, device, cfg.micro_token_budget, "micro_token_budget", 16384
    )
    if not cfg.micro_token_budget:  # auto: say what it came to, so a rerun can pin it
        log(
            f"sft: micro-batches of at most {budget} tokens (micro_token_budget=0, auto: "
            f"from the model and the free memory; --micro-token-budget {budget} repeats "
            "this run on a machine with other free memory)"
        )
    if heldout and processor is not None:
        raise UsageError("held-out fit is measured for text models only (no pixels)")
    probe_train = rng.sample(data, min(len(data), len(heldout))) if heldout else None
    fit_rows = rng.sample(data, min(len(data), FIT_CHECK_SAMPLES)) if cfg.fit_check else None
    history = []

    def epoch_end(epoch: int) -> None:
        if not history or not (heldout or on_epoch is not None):
            return
        model.eval()
        extra: dict = {}
        if heldout:
            for name, rows in (("heldout", heldout), ("train", probe_train)):
                fit = sft_fit(model, rows, pad_id, budget)
                extra.update({f"{name}_{k}": v for k, v in fit.items()})
        if on_epoch is not None:
            extra.update(on_epoch(model, tokenizer, epoch) or {})
        history[-1].update(extra)
        log(f"sft epoch {epoch}: " + ", ".join(f"{k} {v:.4f}" for k, v in extra.items()))
        model.train()

    model.train()
    step, stopped = 0, False
    tic = _clock()
    for epoch in range(cfg.epochs):
        rng.shuffle(order)
        for start in range(0, len(order), cfg.batch_size):
            rows = [data[i] for i in order[start : start + cfg.batch_size]]
            batch = collate(rows, pad_id)
            total_tokens = float(batch.response_mask.sum())
            loss_sum, problem = 0.0, ""
            for _, mb in micro_batches(batch, range(batch.size), budget, SFT_MIN_FILL):
                with autocast:
                    nll, _ = sft_loss(model, mb.to(device), processor)
                problem = problem or nonfinite_loss(nll, "SFT loss", model)
                if problem:
                    break
                (nll / total_tokens).backward()
                loss_sum += float(nll.detach())
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, 1.0))
            if problem or not math.isfinite(grad_norm):
                raise _nonfinite_sft_error(
                    step + 1, problem or f"the gradient norm is {grad_norm}", batch, cfg, dump_dir
                )
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            sched.step()
            step += 1
            record = {
                "step": step,
                "epoch": epoch,
                "loss": loss_sum / max(total_tokens, 1.0),
                "grad_norm": grad_norm,
                "lr": sched.get_last_lr()[0],
                "elapsed_s": _clock() - tic,
            }
            history.append(record)
            if step == 1 or step % 10 == 0 or step == plan["total"]:
                log(
                    f"sft step {step}/{plan['total']} epoch {epoch} loss {record['loss']:.4f} ({record['elapsed_s']:.0f}s)"
                )
            if step == BUDGET_WARMUP_STEPS:
                probe_tic = _clock()
            if cfg.max_seconds is not None and step == BUDGET_PROBE_STEPS:
                spent = _clock() - tic
                per_step = (_clock() - probe_tic) / (step - BUDGET_WARMUP_STEPS)
                fits = step + int(max(0.0, cfg.max_seconds - spent) / per_step)
                if fits < plan["total"]:
                    log(f"sft: {per_step:.2f}s per step, {fits} of {plan['total']} steps fit")
                    plan["total"] = fits
            if fit_rows and step == max(1, math.ceil(cfg.fit_check * plan["total"])):
                model.eval()
                accuracy = sft_fit(model, fit_rows, pad_id, budget)["reply_accuracy"]
                model.train()
                record["fit_check_reply_accuracy"] = accuracy
                if accuracy < cfg.fit_min_reply_accuracy:
                    if restartable:
                        raise SFTPlateau(step, accuracy)
                    log(f"sft: fit check failed (reply accuracy {accuracy:.3f} < "
                        f"{cfg.fit_min_reply_accuracy}); training on")  # fmt: skip
            if cfg.stop_at_success and step % cfg.success_check_every == 0:
                model.eval()
                solved = training_state_success(
                    model, tokenizer, cfg.env, cfg.env_config, cfg.rollout, cfg.seed,
                    SFT_SEED_STEP, cfg.success_check_episodes, cfg.success_check_temperature,
                )  # fmt: skip
                model.train()
                record["sft_state_success"] = solved
                log(f"sft step {step}: solves {solved:.1%} of {cfg.success_check_episodes} "
                    f"SFT states (stops at {cfg.stop_at_success:.0%})")  # fmt: skip
                if solved >= cfg.stop_at_success:
                    record["stopped_at_success"] = solved
                    stopped = True
            if step >= plan["total"] or stopped:
                break
        if stopped:
            log(f"sft: stopped at step {step} of {plan['total']} (epoch {epoch}): the model "
                f"solves {record['stopped_at_success']:.1%} of its SFT states")  # fmt: skip
            epoch_end(epoch)
            break
        if step >= plan["total"] and epoch + 1 < cfg.epochs:
            log(f"sft: time budget reached in epoch {epoch}")
            epoch_end(epoch)
            break
        epoch_end(epoch)
    model.eval()
    return history


def sft_lr_factor(step: int, total: int, warmup: float = 0.0) -> float:
    """The learning-rate multiplier at optimizer step ``step`` of ``total``: linear from
    0 over the first ``warmup`` fraction, then cosine from 1 down to 0.1 (a floor, so the
    last epochs still move; cosine decay keeps them from undoing the format the first
    ones learned)."""
    ramp = int(warmup * total)
    if step < ramp:
        return (step + 1) / ramp
    done = min(step - ramp, total - ramp) / max(total - ramp, 1)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done))


@torch.no_grad()
def sft_fit(model, rows: list[Trajectory], pad_id: int, token_budget: int) -> dict[str, float]:
    """How well ``model`` fits expert samples ``rows``: ``loss`` (mean NLL per assistant
    token), ``token_accuracy`` (assistant tokens that are the argmax) and ``reply_accuracy``
    (samples whose every assistant token is the argmax: greedy decoding reproduces the
    expert's reply, its action included)."""
    device = next(model.parameters()).device
    nll = tokens = correct = replies = exact = 0.0
    for start in range(0, len(rows), 64):
        batch = collate(rows[start : start + 64], pad_id)
        for _, mb in micro_batches(batch, range(batch.size), token_budget):
            mb = mb.to(device)
            want = mb.response_mask[:, 1:].bool()  # (B, T-1)
            logits, targets = wanted_logits(
                model, mb.input_ids, mb.attention_mask, mb.response_mask
            )  # (N, V), (N,)
            nll -= float(torch.log_softmax(logits, -1).gather(1, targets[:, None]).sum())
            hit = logits.argmax(-1) == targets  # (N,)
            hits = torch.zeros_like(want).masked_scatter(want, hit)  # (B, T-1)
            tokens += float(want.sum())
            correct += float(hit.sum())
            replies += mb.size
            exact += float((hits | ~want).all(1).sum())
    return {
        "loss": nll / max(tokens, 1.0),
        "token_accuracy": correct / max(tokens, 1.0),
        "reply_accuracy": exact / max(replies, 1.0),
    }


def _nonfinite_sft_error(
    step: int, what: str, batch: TrainingBatch, cfg: SFTConfig, dump_dir: str | Path | None
) -> NonFiniteError:
    """Save SFT step ``step``'s batch (when ``dump_dir`` is given); the one-line error."""
    saved = ""
    if dump_dir is not None:
        folder = Path(dump_dir) / NONFINITE_DIR / f"step_{step:06d}"
        tensors = {k: getattr(batch, k) for k in ("input_ids", "attention_mask", "response_mask")}
        save_step_data(folder, tensors, {"step": step, "what": what, "lr": cfg.lr})
        saved = f"; the step's batch is saved in {folder} for inspection"
    return NonFiniteError(
        f"sft step {step}: {what}, so training stops before that optimizer step and no "
        f"model is saved{saved}. Fix: lower --lr (now {cfg.lr:g})"
    )


def run_sft(
    base_model: str, out_dir: str | Path, cfg: SFTConfig, log=print, on_epoch=None, device=None
) -> Path:
    """Generate expert data, fine-tune ``base_model`` and save the result to ``out_dir``.

    ``on_epoch(model, tokenizer, epoch) -> dict`` adds metrics after every epoch
    (:func:`train_sft`);
    ``device``: where to train (default: ``ragen.models.loading.pick_device``'s choice).
    """
    cfg.validate()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_policy(base_model, device=device, dtype=torch.float32)
    # the saved model is as big as the one loaded (a LoRA run saves it merged, plus its
    # small adapter): find out now, not after the training, that it cannot be written
    needed = disk_space.state_bytes(model) + disk_space.SMALL_FILES
    disk_space.require_free(out, needed, "the SFT model", _NO_ROOM_FIX)
    torch.manual_seed(cfg.seed)
    log(f"generating {cfg.episodes} expert episodes on {cfg.env} (epsilon={cfg.epsilon})")
    data = make_expert_data(tokenizer, cfg)
    if cfg.aux_reasoning and cfg.aux_episodes:
        aux = make_expert_data(tokenizer, auxiliary_config(cfg))
        log(f"auxiliary data ({cfg.aux_reasoning}): {len(aux)} samples")
        data = data + aux
    success = sum(t.success for t in data) / len(data)
    log(
        f"expert data: {len(data)} samples, expert success {success:.2%}, "
        f"{sum(t.num_response_tokens for t in data)} assistant tokens"
    )
    if cfg.lora_rank > 0:
        # the same adapter layout as LoRA in RL (model.lora.*), so an SFT adapter and an
        # RL run agree on which modules carry adapters
        model = apply_lora(model, LoraConfig(rank=cfg.lora_rank, alpha=cfg.lora_alpha))
    heldout = make_expert_data(tokenizer, cfg, "heldout") if cfg.heldout_episodes else None
    tiny = _tiny_info(base_model) if cfg.fit_check and cfg.lora_rank == 0 else None
    restarts: list[dict] = []
    while True:
        try:
            history = train_sft(
                model, tokenizer, data, cfg, log=log, heldout=heldout, on_epoch=on_epoch,
                dump_dir=out, restartable=tiny is not None and len(restarts) < cfg.fit_restarts,
            )  # fmt: skip
            break
        except SFTPlateau as plateau:
            # a from-scratch model stuck on the plateau: the same data, a new init seed
            init_seed = tiny["seed"] + 1000 * (len(restarts) + 1)
            restarts.append({"step": plateau.step, "reply_accuracy": plateau.reply_accuracy,
                             "next_init_seed": init_seed})  # fmt: skip
            log(f"sft: fit check failed ({plateau}); restart {len(restarts)} of "
                f"{cfg.fit_restarts} from a new init (seed {init_seed})")  # fmt: skip
            model = _redrawn_tiny(model, tokenizer, tiny, init_seed)
    if restarts:
        history[0]["restarts"] = restarts

    check_finite_weights(  # never write a model that would "evaluate" as garbage
        model, f"refusing to save the SFT model to {out}", f"lower --lr (now {cfg.lr:g})"
    )
    if cfg.lora_rank > 0:
        with quiet_transformers():  # the adapter alone, for `ragen sft merge`
            model.save_pretrained(out / "adapter")
        model = model.merge_and_unload()
    try:
        with quiet_transformers():
            model.save_pretrained(out, safe_serialization=True)
            tokenizer.save_pretrained(out)
    except Exception as err:
        if not disk_space.is_disk_full(err, out, needed):
            raise
        for partial in out.glob("model*.safetensors*"):  # never leave weights that load wrong
            partial.unlink()
        free = disk_space.mb(disk_space.free_bytes(out) or 0)
        raise DiskFullError(
            f"disk full while saving the SFT model to {out} (needed ~"
            f"{disk_space.mb(needed)}, {free} free): the trained weights were not written. "
            f"Fix: {_NO_ROOM_FIX}"
        ) from None
    (out / "sft_config.json").write_text(
        json.dumps({"base_model": base_model, **asdict(cfg)}, indent=2)
    )
    with open(out / "sft_metrics.jsonl", "w") as f:
        for rec in history:
            f.write(json.dumps(rec) + "\n")
    log(f"saved SFT model to {out}")
    return out


_NO_ROOM_FIX = "free space on that disk, or write the model elsewhere (--out), and run again"


def _tiny_info(base_model: str) -> dict | None:
    """The ``ragen_tiny.json`` of a from-scratch tiny model folder (size, seed, chat
    format), or None for any other model: only those may be drawn again."""
    path = Path(base_model) / "ragen_tiny.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _redrawn_tiny(model, tokenizer, info: dict, seed: int):
    """A fresh random init of the tiny model ``model`` is (same size, tokenizer and
    chat format; init seed ``seed``), on ``model``'s device."""
    from ragen.models.tiny import build_model

    device = next(model.parameters()).device
    fresh = build_model(
        info["size"], tokenizer, seed=seed, chat_format=info.get("chat_format", "chatml")
    )
    return fresh.to(device=device, dtype=torch.float32)


def merge_adapter(base_model: str, adapter_dir: str | Path, out_dir: str | Path) -> Path:
    """Fold a LoRA adapter into its base model and save a plain HF model."""
    from peft import PeftModel

    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / "adapter_config.json").exists():
        raise UsageError(
            f"{adapter_dir} has no adapter_config.json; pass the folder `ragen sft` wrote as <out>/adapter"
        )
    model, tokenizer = load_policy(base_model, dtype=torch.float32)
    out = Path(out_dir)
    with quiet_transformers():
        merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
        merged.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
    return out
