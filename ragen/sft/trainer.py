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

from ragen.agent.rollout import RolloutConfig
from ragen.agent.trajectory import Trajectory
from ragen.errors import ConfigError, NonFiniteError, UsageError
from ragen.models.loading import quiet_transformers
from ragen.trainer.batching import TrainingBatch, collate, micro_batches

SFT_SEED_STEP = 10_000_000  # the training-seed step SFT's expert episodes start from


@dataclass
class SFTConfig:
    env: str = "sokoban"  # a registered environment (``ragen envs``)
    env_config: dict = field(default_factory=dict)  # the env's own knobs
    # how the expert episodes are played and prompted: max_turns, max_actions_per_turn,
    # think, prompt_style, context_window must match the RL run's rollout.* (its
    # env_groups/group_size/sampling knobs are unused here)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    episodes: int = 512  # expert episodes generated
    epsilon: float = 0.0  # fraction of expert actions replaced by random valid ones
    actions_per_turn: int = 1  # expert actions per response (<= rollout.max_actions_per_turn)
    seed: int = 0
    epochs: int = 2
    batch_size: int = 32  # sequences per optimizer step
    # padded tokens per forward/backward micro-batch. 4096 pads Sokoban expert data 9%
    # (16384: 20%) and ran an epoch 1.3-1.4x faster with the same losses, but in one
    # demo-length run the grid phase change came later; kept at 16384 until measured on
    # more seeds (docs/RESULTS.md, "Rollout and update speed")
    micro_token_budget: int = 16384
    lr: float = 5e-4
    weight_decay: float = 0.0
    lora_rank: int = 0  # 0 = full fine-tuning
    lora_alpha: int = 16
    only_successful: bool = False  # keep only episodes the (noisy) expert solved
    # forward + backward under bf16 autocast on a CPU with bf16 instructions (weights,
    # grads and AdamW stay float32; a no-op elsewhere: ragen.models.precision). On the
    # dev CPU (avx512_bf16) 1.4x faster, the same loss for 16 steps, but in the demo's
    # 1,032-step Sokoban warm start the loss plateau lasted longer (docs/RESULTS.md,
    # "Rollout and update speed"), so it is off by default
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
        # `not a <= x` style checks: NaN fails them too (an inf/NaN lr trains NaN weights)
        if not 0 < self.lr < math.inf:
            raise ConfigError(
                f"lr: the learning rate must be a finite number > 0, got {self.lr}. "
                "Fix: e.g. --lr 5e-4 (the default)"
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


def make_expert_data(tokenizer, cfg: SFTConfig, split: str = "train") -> list[Trajectory]:
    """Oracle rollouts (with ``epsilon`` noise) as token-exact samples, on training states
    (``split="train"``, what SFT trains on) or on the held-out validation states
    (``split="validation"``: expert answers to probe a model on states it never saw;
    never train on these)."""
    if split not in ("train", "validation"):
        raise UsageError(f"split must be train or validation, got {split!r}")
    cfg.validate()
    from ragen.agent.env_manager import EnvStateManager
    from ragen.agent.policies import OraclePolicy
    from ragen.agent.rollout import run_rollout

    manager = EnvStateManager(
        cfg.env, dict(cfg.env_config), env_groups=cfg.episodes, group_size=1, seed=cfg.seed
    )
    policy = OraclePolicy(
        actions_per_turn=cfg.actions_per_turn,
        epsilon=cfg.epsilon,
        seed=cfg.seed,
        tokenizer=tokenizer,
    )
    # SFT episodes are training states (never validation states), drawn as a step that
    # no RL run reaches
    if split == "train":
        seeds = manager.seeds_for_step(SFT_SEED_STEP)
    else:
        seeds = manager.validation_seeds(cfg.episodes)
    result = run_rollout(policy, manager, replace(cfg.rollout, seed=cfg.seed), seeds)
    data = [t for t in result.trajectories if t.num_response_tokens > 0]
    if cfg.only_successful:
        data = [t for t in data if t.success]
    if not data:
        raise UsageError(
            f"no expert trajectories for env {cfg.env!r}: the expert solved none of "
            f"{cfg.episodes} episodes. Fix: only_successful=false, or a lower epsilon"
        )
    return data


def sft_loss(model, batch: TrainingBatch, processor=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed negative log-likelihood over response tokens and their count.

    batch tensors are (B, T); the LM head runs only where a response token is predicted
    (``sequence_logprobs`` with ``positions=response_mask``). A VLM's rows carry their
    pictures (``batch.images``): ``processor`` turns them into pixel inputs.
    """
    from ragen.models.logprobs import sequence_logprobs
    from ragen.models.vlm import forward_inputs, row_images

    vision = {}
    if batch.images and processor is not None:  # pixels (+ Qwen2-VL's M-RoPE positions)
        dtype = next(model.parameters()).dtype
        images = row_images(batch.images)
        vision = forward_inputs(
            model, processor, batch.input_ids, batch.attention_mask, images, dtype
        )
    mask = batch.response_mask
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
    dump_dir: str | Path | None = None,
) -> list[dict]:
    """Train ``model`` in place on ``data``; returns per-step metrics.

    A NaN/inf loss or gradient stops training before that optimizer step with a
    :class:`~ragen.errors.NonFiniteError`; with ``dump_dir`` the step's batch is saved in
    ``dump_dir/nonfinite/step_N`` first (``ragen.trainer.nonfinite``)."""
    from ragen.models.vlm import is_processor, text_tokenizer
    from ragen.trainer.nonfinite import nonfinite_loss

    device = next(model.parameters()).device
    processor = tokenizer if is_processor(tokenizer) else None  # a VLM: pixels too
    text_tok = text_tokenizer(tokenizer)
    pad_id = text_tok.pad_token_id if text_tok.pad_token_id is not None else text_tok.eos_token_id
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = random.Random(cfg.seed)
    order = list(range(len(data)))
    steps_per_epoch = math.ceil(len(data) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    # cosine decay keeps the last epochs from undoing the format the first ones learned
    sched = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, total) / max(total, 1))),
    )
    from ragen.models.precision import cpu_autocast

    autocast = cpu_autocast(cfg.bf16 and device.type == "cpu")
    history = []
    model.train()
    step = 0
    tic = time.perf_counter()
    for epoch in range(cfg.epochs):
        rng.shuffle(order)
        for start in range(0, len(order), cfg.batch_size):
            rows = [data[i] for i in order[start : start + cfg.batch_size]]
            batch = collate(rows, pad_id)
            total_tokens = float(batch.response_mask.sum())
            loss_sum, problem = 0.0, ""
            for _, mb in micro_batches(batch, range(batch.size), cfg.micro_token_budget):
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
                "elapsed_s": time.perf_counter() - tic,
            }
            history.append(record)
            if step == 1 or step % 10 == 0 or step == total:
                log(
                    f"sft step {step}/{total} epoch {epoch} loss {record['loss']:.4f} ({record['elapsed_s']:.0f}s)"
                )
    model.eval()
    return history


def _nonfinite_sft_error(
    step: int, what: str, batch: TrainingBatch, cfg: SFTConfig, dump_dir: str | Path | None
) -> NonFiniteError:
    """Save SFT step ``step``'s batch (when ``dump_dir`` is given); the one-line error."""
    saved = ""
    if dump_dir is not None:
        from ragen.trainer.nonfinite import NONFINITE_DIR, save_step_data

        folder = Path(dump_dir) / NONFINITE_DIR / f"step_{step:06d}"
        tensors = {k: getattr(batch, k) for k in ("input_ids", "attention_mask", "response_mask")}
        save_step_data(folder, tensors, {"step": step, "what": what, "lr": cfg.lr})
        saved = f"; the step's batch is saved in {folder} for inspection"
    return NonFiniteError(
        f"sft step {step}: {what}, so training stops before that optimizer step and no "
        f"model is saved{saved}. Fix: lower --lr (now {cfg.lr:g})"
    )


def run_sft(base_model: str, out_dir: str | Path, cfg: SFTConfig, log=print) -> Path:
    """Generate expert data, fine-tune ``base_model`` and save the result to ``out_dir``."""
    from ragen.models import load_policy

    cfg.validate()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_policy(base_model, dtype=torch.float32)
    torch.manual_seed(cfg.seed)
    log(f"generating {cfg.episodes} expert episodes on {cfg.env} (epsilon={cfg.epsilon})")
    data = make_expert_data(tokenizer, cfg)
    success = sum(t.success for t in data) / len(data)
    log(
        f"expert data: {len(data)} samples, expert success {success:.2%}, "
        f"{sum(t.num_response_tokens for t in data)} assistant tokens"
    )
    if cfg.lora_rank > 0:
        from ragen.trainer.config import LoraConfig
        from ragen.trainer.setup import apply_lora

        # the same adapter layout as LoRA in RL (model.lora.*), so an SFT adapter and an
        # RL run agree on which modules carry adapters
        model = apply_lora(model, LoraConfig(rank=cfg.lora_rank, alpha=cfg.lora_alpha))
    history = train_sft(model, tokenizer, data, cfg, log=log, dump_dir=out)
    from ragen.models.finite import check_finite_weights

    check_finite_weights(  # never write a model that would "evaluate" as garbage
        model, f"refusing to save the SFT model to {out}", f"lower --lr (now {cfg.lr:g})"
    )
    if cfg.lora_rank > 0:
        with quiet_transformers():  # the adapter alone, for `ragen sft merge`
            model.save_pretrained(out / "adapter")
        model = model.merge_and_unload()
    with quiet_transformers():
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
    (out / "sft_config.json").write_text(
        json.dumps({"base_model": base_model, **asdict(cfg)}, indent=2)
    )
    with open(out / "sft_metrics.jsonl", "w") as f:
        for rec in history:
            f.write(json.dumps(rec) + "\n")
    log(f"saved SFT model to {out}")
    return out


def merge_adapter(base_model: str, adapter_dir: str | Path, out_dir: str | Path) -> Path:
    """Fold a LoRA adapter into its base model and save a plain HF model."""
    from peft import PeftModel

    from ragen.models import load_policy

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
