"""Build what a run needs from its config: LoRA adapters, optimizers, schedulers.

Kept apart from the loop so that ``starpo.py`` reads as the algorithm. Model names,
devices and dtypes are resolved by :mod:`ragen.models.loading`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .config import LoraConfig


def apply_lora(model: torch.nn.Module, lora_cfg: LoraConfig) -> torch.nn.Module:
    """Wrap ``model`` with PEFT LoRA adapters (``model.lora.*``); only the adapters stay
    trainable."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    config = PeftLoraConfig(
        r=int(lora_cfg.rank),
        lora_alpha=int(lora_cfg.alpha),
        lora_dropout=float(lora_cfg.dropout),
        target_modules=list(lora_cfg.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")  # a bug, not a user error
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.999), eps=1e-8)


def make_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int) -> Any:
    """Linear warm-up to the base learning rate, then constant (as in RAGEN)."""
    warmup = max(0, int(warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 1.0 if warmup == 0 else min(1.0, (step + 1) / warmup)
    )
