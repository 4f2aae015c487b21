"""Micro-batches that fit by construction: a token budget from the model's size and the
memory the device has free, and a clear error before a budget that cannot fit is tried.

Training keeps every layer's activations for the backward pass, so a micro-batch of ``n``
tokens costs about ``n * bytes_per_token``::

    bytes_per_token ~= layers * (10 * hidden + 2 * mlp_width) * 4     (float32)

measured on SmolLM2-135M-Instruct (30 layers, hidden 576, MLP 1,536: 1.07 MB per token
at the margin, 1,024 -> 2,048 tokens, forward + backward on a CPU; the formula gives
1.06 MB) and an upper bound for the tiny models. The LM head needs no share of it:
``ragen.models.head_logprobs`` never holds the ``(N, V)`` logits.

``micro_token_budget = 0`` (``auto``, the default) takes the caller's usual budget, or
less where only less fits: ``fraction`` of the free memory over that, rounded down to a
power of two (so that a seeded run does not change with the memory other jobs hold), at
least :data:`MIN_BUDGET` tokens; an explicit budget whose
activations would exceed the free memory is refused with the setting to lower. On a
CPU, "free" is ``MemAvailable`` (the kernel's estimate; Linux overcommits, so a budget
that does not fit is not refused by the allocator but killed by the OOM killer, with no
message: hence the check before the first step).
"""

from __future__ import annotations

from typing import Any

from ragen.errors import ConfigError

MIN_BUDGET = 512
MAX_BUDGET = 65_536
AUTO_FRACTION = 0.4  # of the free memory, for one micro-batch's activations


def _text_config(model: Any) -> Any:
    """The config of ``model``'s language model (a VLM's ``text_config``), or None."""
    config = getattr(model, "config", None)
    return getattr(config, "text_config", None) or config


def activation_bytes_per_token(model: Any) -> int:
    """Bytes of activations one training token keeps for the backward pass (float32)."""
    config = _text_config(model)
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    mlp = int(getattr(config, "intermediate_size", 0) or 4 * hidden)
    if not hidden or not layers:
        return 0  # unknown architecture: no estimate
    return layers * (10 * hidden + 2 * mlp) * 4


def kv_bytes_per_token(model: Any) -> int:
    """Bytes the K/V cache holds per token of context, all layers::

    layers * 2 * kv_heads * head_dim * element_size      (0 when unknown)
    """
    config = _text_config(model)
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    if not layers or not heads or not hidden:
        return 0  # unknown architecture: no estimate
    kv_heads = int(getattr(config, "num_key_value_heads", 0) or heads)
    head_dim = int(getattr(config, "head_dim", 0) or hidden // heads)
    try:
        element = next(model.parameters()).element_size()
    except (AttributeError, StopIteration):
        element = 4
    return layers * 2 * kv_heads * head_dim * element


def rows_that_fit(
    model: Any, device: Any, tokens_per_row: int, fraction: float = AUTO_FRACTION
) -> int | None:
    """How many generation rows of ``tokens_per_row`` context each keep their K/V caches
    within ``fraction`` of the free memory (at least 1); None when the model's size or
    the free memory cannot be told."""
    per_token, free = kv_bytes_per_token(model), free_bytes(device)
    if not per_token or free is None or tokens_per_row < 1:
        return None
    return max(1, int(fraction * free // (per_token * tokens_per_row)))


def free_bytes(device: Any) -> int | None:
    """Memory free for new tensors on ``device`` (CUDA: ``mem_get_info``; CPU: the
    kernel's ``MemAvailable``), or None when it cannot be told."""
    import torch

    kind = getattr(device, "type", str(device))
    if kind == "cuda" and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if kind == "cpu":
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


def auto_token_budget(model: Any, device: Any, fraction: float = AUTO_FRACTION) -> int:
    """The micro-batch token budget that keeps activations within ``fraction`` of the free
    memory, rounded down to a power of two (``MAX_BUDGET`` when either cannot be told).

    Why a power of two: the budget decides which rows share a micro-batch, and so the
    float rounding of every forward (visible at once under bf16 autocast). Taken as is,
    it changes with every megabyte other jobs hold, and a seeded run with it; rounded,
    it moves only when the free memory crosses a power of two. A run that must repeat
    on any machine pins ``micro_token_budget`` (the trainer prints the one it took).
    """
    per_token, free = activation_bytes_per_token(model), free_bytes(device)
    if not per_token or free is None:
        return MAX_BUDGET
    fits = int(min(MAX_BUDGET, max(MIN_BUDGET, fraction * free // per_token)))
    return 1 << (fits.bit_length() - 1)  # MIN_BUDGET and MAX_BUDGET are powers of two


def resolve_token_budget(model: Any, device: Any, budget: int, key: str, cap: int) -> int:
    """The micro-batch token budget to use: ``budget``, or for 0 (``auto``) the smaller of
    ``cap`` and :func:`auto_token_budget`; an explicit budget whose activations alone
    would not fit in the free memory is refused with a :class:`ConfigError` naming ``key``."""
    if budget == 0:
        return min(cap, auto_token_budget(model, device))
    per_token, free = activation_bytes_per_token(model), free_bytes(device)
    if per_token and free is not None and budget * per_token > free:
        fits = auto_token_budget(model, device)
        raise ConfigError(
            f"{key}={budget}: a micro-batch of {budget} tokens keeps about "
            f"{budget * per_token / 2**30:.1f} GiB of activations, and only "
            f"{free / 2**30:.1f} GiB is free on {device}. Fix: {key}={fits} (what fits), "
            f"or {key}=0 to pick it automatically"
        )
    return budget
