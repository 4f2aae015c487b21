"""Build what a run needs from its config: device, dtype, actor, critic, reference, optimizers.

Kept apart from the loop so that ``starpo.py`` reads as the algorithm.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

TINY_PREFIX = "tiny"


def cache_dir() -> Path:
    """Where auto-built tiny models and fetched files live (``$RAGEN_CACHE``)."""
    return Path(os.environ.get("RAGEN_CACHE", Path.home() / ".cache" / "ragen"))


def resolve_model_path(path: str, seed: int = 0) -> str:
    """``tiny`` / ``tiny:SIZE`` -> a tiny model folder built offline on first use;
    ``~`` is expanded; anything else (folder, .gguf file, hub id) passes through."""
    if path == TINY_PREFIX or path.startswith(TINY_PREFIX + ":"):
        from ragen.models.tiny import create_tiny

        size = path.split(":", 1)[1] if ":" in path else "micro"
        out = cache_dir() / "models" / f"tiny-{size}-seed{seed}"
        if not (out / "config.json").exists():
            create_tiny(out, size=size, seed=seed)
        return str(out)
    return os.path.expanduser(path)


def pick_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"model.device={spec} but CUDA is not available; use model.device=cpu or auto"
        )
    return device


def pick_dtype(spec: str, device: torch.device) -> torch.dtype:
    """Training weights stay float32 unless asked; bf16 compute comes from autocast."""
    if spec == "auto":
        return torch.float32
    names = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if spec not in names:
        raise ValueError(f"model.dtype={spec!r}: use auto, float32, bfloat16 or float16")
    return names[spec]


def apply_lora(model: torch.nn.Module, lora_cfg: DictConfig) -> torch.nn.Module:
    """Wrap ``model`` with PEFT LoRA adapters; only the adapters stay trainable."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
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
        raise ValueError("the model has no trainable parameters")
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.999), eps=1e-8)


def make_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int) -> Any:
    """Linear warm-up to the base learning rate, then constant (as in RAGEN)."""
    warmup = max(0, int(warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 1.0 if warmup == 0 else min(1.0, (step + 1) / warmup)
    )
