"""LoRA adapters (PEFT) for both trainers: the config, adding them, folding them in.

``model.lora.*`` of an RL run and ``ragen sft --lora-rank`` build the same
:class:`LoraConfig`, so an SFT adapter and an RL run agree on which modules carry
adapters. :func:`apply_lora` wraps a loaded model (only the adapters stay trainable);
:func:`merge_adapter` folds a saved adapter into its base model (``ragen sft merge``).
peft imports transformers, so it is imported only where an adapter is made or merged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ragen.config_fields import option
from ragen.errors import UsageError

from .hf_setup import quiet_transformers
from .loading import load_policy


@dataclass
class LoraConfig:
    rank: int = option(0, "0 = full fine-tuning; > 0 trains LoRA adapters of this rank", ge=0)
    alpha: int = option(16, "LoRA scaling: the adapter's update is scaled by alpha / rank", gt=0)
    dropout: float = option(0.0, "dropout on the LoRA adapters' input", ge=0, lt=1)
    target_modules: list[str] = option(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
        help="the modules that get adapters (the attention and MLP projections of "
        "Llama/Qwen-style models)",
    )


def apply_lora(model: torch.nn.Module, lora_cfg: LoraConfig) -> torch.nn.Module:
    """Wrap ``model`` with PEFT LoRA adapters (``model.lora.*``); only the adapters stay
    trainable."""
    from peft import LoraConfig as PeftLoraConfig  # deferred: peft imports transformers
    from peft import get_peft_model

    config = PeftLoraConfig(
        r=int(lora_cfg.rank),
        lora_alpha=int(lora_cfg.alpha),
        lora_dropout=float(lora_cfg.dropout),
        target_modules=list(lora_cfg.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def merge_adapter(base_model: str, adapter_dir: str | Path, out_dir: str | Path) -> Path:
    """Fold a LoRA adapter into its base model and save a plain HF model."""
    from peft import PeftModel  # deferred: peft imports transformers

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
