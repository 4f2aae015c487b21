"""Which attention function a transformers model runs, and the grouped-query SDPA that
the training forward uses on the CPU.

transformers picks a model's attention at call time from ``config._attn_implementation``
(its ``AttentionInterface``), so :func:`attention_implementation` routes one block of
calls to another registered function and restores the model's own afterwards: a saved
checkpoint never names a function that only this process registered.

Why a training attention of our own (:func:`gqa_sdpa_attention`). A grouped-query model
has fewer K/V heads than query heads (``tiny:nano``: 4 query heads, 2 K/V heads;
SmolLM2-135M: 9 and 3). transformers' SDPA path passes a mask during training, and with
a mask it expands K and V to every query head (``repeat_kv``: a copy of both, and in
the backward a sum over the copies) unless the device is one it trusts with
``enable_gqa``. On the CPU, SDPA's flash kernel reads each K/V head for its group of
query heads directly, with the same mask. Measured on the shapes of the demo's
FrozenLake update (``tiny:nano``, 123 rows of 43 query and 87 key columns, forward and
backward, one thread): 29.5 -> 22.9 ms; rows of 3 new columns: 5.4 -> 2.6 ms. The
output and the query's gradient are bitwise the same; the K/V gradients sum the group's
query heads in another order (within one float32 rounding step).

On a GPU the function is not used: there SDPA's fast kernels do not take
``enable_gqa`` with a mask and it would fall back to the math kernel.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

__all__ = [
    "TRAINING_ATTENTION",
    "attention_implementation",
    "config_of",
    "gqa_sdpa_attention",
    "training_attention",
]

#: the name :func:`gqa_sdpa_attention` is registered under in transformers'
#: ``AttentionInterface`` (with SDPA's mask builder)
TRAINING_ATTENTION = "ragen_gqa_sdpa"


def config_of(model: Any) -> Any:
    """The transformers config of ``model`` (through a PEFT wrapper), or None."""
    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(target, "config", None)


@contextlib.contextmanager
def attention_implementation(config: Any, name: str | None):
    """Route the model's attention to ``name`` inside the block (None: leave it)."""
    if name is None or config is None:
        yield
        return
    previous = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous


def gqa_sdpa_attention(
    module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs
):
    """transformers' SDPA attention with the K/V heads read in place (``enable_gqa``).

    ``query`` (b, H, S, D); ``key``/``value`` (b, H_kv, L, D) with ``H % H_kv == 0``;
    ``attention_mask`` a boolean or additive (b, 1, S, L) mask, or None (causal when
    ``S > 1``). Returns ``(out (b, S, H, D), None)`` as transformers' attention
    functions do. What this path does not cover (equal head counts, a position bias,
    soft-capping, a causal block shorter than its keys without a mask) goes to
    transformers' own ``sdpa_attention_forward``.
    """
    import torch.nn.functional as F
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q_len = query.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(q_len > 1 and attention_mask is None and causal)
    plain = (
        query.shape[1] == key.shape[1]
        or kwargs.get("position_bias") is not None
        or kwargs.get("softcap") is not None
        or (causal and key.shape[2] != q_len)
    )
    if plain:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
            is_causal=is_causal, **kwargs,
        )  # fmt: skip
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        is_causal=causal, enable_gqa=True,
    )  # fmt: skip
    return out.transpose(1, 2).contiguous(), None


@functools.cache
def _register() -> bool:
    """Register :func:`gqa_sdpa_attention` and SDPA's mask builder under
    :data:`TRAINING_ATTENTION` (once); False with a transformers without them."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    except ImportError:
        return False
    AttentionInterface.register(TRAINING_ATTENTION, gqa_sdpa_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(TRAINING_ATTENTION, sdpa_mask)
    return True


def training_attention(model: Any):
    """A context manager for one training or scoring forward of ``model``: on the CPU,
    a grouped-query model that runs transformers' SDPA runs :func:`gqa_sdpa_attention`
    instead; any other model or device is left as it is."""
    config = config_of(model)
    name = None
    if config is not None and getattr(config, "_attn_implementation", None) == "sdpa":
        heads = getattr(config, "num_attention_heads", None)
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        device = next((p.device for p in model.parameters()), None)
        if heads and kv_heads and heads != kv_heads and device is not None:
            if device.type == "cpu" and _register():
                name = TRAINING_ATTENTION
    return attention_implementation(config, name)
