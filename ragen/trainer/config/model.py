"""The ``model`` section: which policy and critic, where they run, how they learn.

``model.lora`` is :class:`ragen.models.lora.LoraConfig`, the one SFT builds too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ragen.config_fields import option
from ragen.engines.base import ENGINE_CHOICES
from ragen.models.loading import DTYPE_CHOICES, check_device_spec
from ragen.models.lora import LoraConfig


@dataclass
class ModelConfig:
    path: str = option(
        "tiny",
        "the policy: a hub id, a local HF folder, a .gguf file, or tiny[:SIZE] (built "
        "offline on first use)",
    )
    critic_path: str | None = option(
        None,
        "the critic's starting weights; null: the policy's weights plus a "
        "zero-initialized value head",
    )
    dtype: str = option(
        "auto",
        "weight dtype: auto (float32 weights, bf16 autocast on CUDA), float32, bfloat16 or float16",
        choices=DTYPE_CHOICES,
    )
    device: str = option(
        "auto",
        "where the models run: auto (CUDA when available, else CPU), cpu, cuda or cuda:N",
        check=check_device_spec,
    )
    engine: str = option(
        "static",
        "generation engine (ragen.engines.compiled): eager; static (a faster decode "
        "step, the same samples); compiled (static + torch.compile, a one-off compile of "
        "seconds to minutes); static-bf16 (static with bf16 matmuls and K/V: faster, NOT "
        "exact; docs/MODELS.md); static-graphs (static replayed as CUDA graphs on a GPU; "
        "docs/SPEED.md)",
        choices=ENGINE_CHOICES,
    )
    actor_lr: float = option(
        1e-6, "the policy's learning rate (AdamW)", gt=0, fix="e.g. 1e-6 for a 0.5B model"
    )
    critic_lr: float = option(
        1e-5, "the critic's learning rate (AdamW)", gt=0, fix="e.g. 1e-5 for a 0.5B model"
    )
    weight_decay: float = option(
        0.0, "AdamW weight decay of the policy and the critic", ge=0, fix="0 turns it off"
    )
    warmup_steps: int = option(
        0,
        "linear learning-rate warm-up over this many updates (RL steps: every optimizer step "
        "of update k runs at k / warmup_steps of the lr), then constant (0 = none)",
        ge=0,
        fix="0 turns it off",
    )
    gradient_checkpointing: bool = option(
        False, "recompute activations in the backward pass: less memory, slower updates"
    )
    lora: LoraConfig = field(default_factory=LoraConfig)
