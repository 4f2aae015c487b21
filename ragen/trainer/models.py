"""What a step computes with: the models, their optimizers and schedulers, and how they run.

:func:`build_models` turns a config's ``model`` section into a :class:`TrainModels`: the
actor (LoRA-wrapped when ``model.lora.rank > 0``), the frozen reference (only with a KL
term, and only without LoRA: there the reference is the actor with its adapters off),
the critic (``algo.use_critic``), an AdamW optimizer and a warm-up scheduler per trained
model, the device, dtype and autocast context of every forward, and the micro-batch
token budget. The trainer builds one; each data-parallel rank builds its own with the
same call (``ragen.distributed.data_parallel``), so a rank holds exactly what the
trainer's phases read and nothing else.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ragen.models import load_policy
from ragen.models.hf_setup import enable_activation_checkpointing
from ragen.models.loading import pick_device, pick_dtype
from ragen.models.lora import apply_lora
from ragen.models.memory import resolve_token_budget
from ragen.models.names import resolve_model
from ragen.models.precision import cpu_autocast
from ragen.models.value import create_critic
from ragen.models.vlm import text_tokenizer

if TYPE_CHECKING:
    from .config import TrainConfig


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators (model init, dropout)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


@dataclass
class TrainModels:
    """The trained (and frozen) models of a run and everything a forward pass needs.

    ``ref`` is None unless a KL term needs a separate frozen copy; ``critic`` and its
    optimizer and scheduler are None without a critic. ``token_budget``: the padded
    tokens of one micro-batch when ``algo.micro_token_budget`` is 0 (auto), resolved
    once from free memory so micro-batches never depend on what is free mid-run.
    Sharding (``ragen.distributed.fsdp``) replaces the models' parameters and the
    optimizers and schedulers in place on this object.
    """

    device: torch.device
    dtype: torch.dtype
    autocast: Any  # a reusable context manager: bf16 autocast, or a no-op
    model_path: str
    tokenizer: Any  # a tokenizer, or a VLM's processor
    pad_id: int
    use_lora: bool
    actor: torch.nn.Module
    ref: torch.nn.Module | None
    critic: torch.nn.Module | None
    actor_opt: torch.optim.Optimizer
    actor_sched: Any
    critic_opt: torch.optim.Optimizer | None
    critic_sched: Any
    token_budget: int

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """``{"actor": ..., "critic": ...}`` (the critic's only when there is one)."""
        out = {"actor": self.actor_opt}
        if self.critic_opt is not None:
            out["critic"] = self.critic_opt
        return out

    def schedulers(self) -> dict[str, Any]:
        out = {"actor": self.actor_sched}
        if self.critic_sched is not None:
            out["critic"] = self.critic_sched
        return out


#: trainable parameters from which AdamW runs fused (one kernel over all of them)
FUSED_ADAMW_FROM = 50_000_000


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW over ``model``'s trainable parameters (the LoRA adapters alone, with LoRA).

    From :data:`FUSED_ADAMW_FROM` trainable parameters (a real model trained whole) AdamW
    runs fused: one kernel over all parameters instead of several per tensor. The fused
    step rounds differently in the last bits, so smaller models (the tiny ones, LoRA
    adapters) keep the unfused step their seeded runs and recorded results were made with."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")  # a bug, not a user error
    # plain tensors only: FSDP2's sharded parameters (DTensor) keep the unfused step
    plain = all(type(p) is torch.nn.Parameter for p in params)
    fused = plain and sum(p.numel() for p in params) >= FUSED_ADAMW_FROM
    return torch.optim.AdamW(
        params,
        lr=lr,
        weight_decay=weight_decay,
        betas=(0.9, 0.999),
        eps=1e-8,
        **({"fused": True} if fused else {}),
    )


def make_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int) -> Any:
    """Linear warm-up to the base learning rate, then constant (as in RAGEN)."""
    warmup = max(0, int(warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 1.0 if warmup == 0 else min(1.0, (step + 1) / warmup)
    )


def training_autocast(cfg: TrainConfig, device: torch.device) -> Any:
    """bf16 autocast on CUDA (``trainer.bf16``) or a CPU with bf16 instructions
    (``trainer.bf16_cpu``); a no-op context otherwise."""
    t = cfg.trainer
    if t.bf16 and device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return cpu_autocast(t.bf16_cpu and device.type == "cpu")


def build_models(cfg: TrainConfig) -> TrainModels:
    """Load and set up every model of ``cfg`` (see the module doc)."""
    m = cfg.model
    device = pick_device(m.device, key="model.device")
    dtype = pick_dtype(device, m.dtype, training=True)
    path = resolve_model(m.path, seed=0)
    actor, tokenizer = load_policy(path, device=str(device), dtype=dtype)
    if m.gradient_checkpointing:
        enable_activation_checkpointing(actor)
        actor.config.use_cache = False
    use_lora = m.lora.rank > 0
    if use_lora:
        actor = apply_lora(actor, m.lora)
    ref = None
    if cfg.algo.kl_coef > 0 and not use_lora:
        # A frozen copy of the initial policy. With LoRA the reference is the same
        # model with adapters disabled (no second copy in memory).
        ref = copy.deepcopy(actor).eval().requires_grad_(False)
    critic = critic_opt = critic_sched = None
    if cfg.algo.use_critic:
        critic = create_critic(m.critic_path or path, device=str(device), dtype=dtype)
        if m.gradient_checkpointing:
            enable_activation_checkpointing(critic)
    actor_opt = make_optimizer(actor, m.actor_lr, m.weight_decay)
    actor_sched = make_scheduler(actor_opt, m.warmup_steps)
    if critic is not None:
        critic_opt = make_optimizer(critic, m.critic_lr, m.weight_decay)
        critic_sched = make_scheduler(critic_opt, m.warmup_steps)
    text_tok = text_tokenizer(tokenizer)  # a VLM's processor holds its tokenizer
    pad_id = text_tok.pad_token_id if text_tok.pad_token_id is not None else text_tok.eos_token_id
    # the micro-batch's tokens: what fits in memory, checked before the first step
    budget = resolve_token_budget(
        actor, device, cfg.algo.micro_token_budget, "algo.micro_token_budget", 8192
    )
    return TrainModels(
        device=device,
        dtype=dtype,
        autocast=training_autocast(cfg, device),
        model_path=path,
        tokenizer=tokenizer,
        pad_id=pad_id,
        use_lora=use_lora,
        actor=actor,
        ref=ref,
        critic=critic,
        actor_opt=actor_opt,
        actor_sched=actor_sched,
        critic_opt=critic_opt,
        critic_sched=critic_sched,
        token_budget=budget,
    )
