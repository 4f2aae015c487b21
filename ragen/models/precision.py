"""bf16 autocast on CPU, where the CPU has bf16 instructions.

    with cpu_autocast(cfg.trainer.bf16_cpu):     # a no-op when off or unsupported
        loss = ...

Under ``torch.autocast("cpu", dtype=torch.bfloat16)`` matmuls and linear layers run in
bf16 (oneDNN's ``avx512_bf16`` / AMX kernels) while softmax, log-softmax and losses stay
float32; the weights, gradients and AdamW state stay float32. On a CPU without bf16
instructions oneDNN would emulate bf16, which is slower than float32, so the context is
then a no-op.
"""

from __future__ import annotations

import contextlib
import functools


@functools.cache
def cpu_bf16_supported() -> bool:
    """Whether this CPU runs bf16 matmuls natively (oneDNN's check: avx512_bf16 or AMX)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def cpu_autocast(enabled: bool):
    """``torch.autocast("cpu", bf16)`` when ``enabled`` and supported, else a no-op context.

    The returned object can be entered many times (one per forward)."""
    import torch

    if enabled and cpu_bf16_supported():
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def autocast_for(device, enabled: bool):
    """bf16 autocast for ``device`` (a ``torch.device``): CUDA always has it, a CPU only
    with bf16 instructions (:func:`cpu_autocast`); a no-op context when ``enabled`` is
    False or the device has no bf16 arithmetic. Weights, gradients and optimizer state
    stay in their own dtype (float32)."""
    import torch

    if enabled and getattr(device, "type", str(device)) == "cuda" and torch.cuda.is_available():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if getattr(device, "type", str(device)) == "cpu":
        return cpu_autocast(enabled)
    return contextlib.nullcontext()
