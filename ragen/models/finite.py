"""Refuse model weights that hold NaN or inf.

A model whose weights went non-finite (an inf learning rate, a NaN loss that reached the
optimizer) still runs: its logits are NaN, sampling falls back to arbitrary ids, and an
evaluation prints a normal-looking table. So the weights are checked where they cross a
boundary: before a checkpoint or an SFT model is saved, and after any model is loaded
(``ragen.models.loading.load_policy``, the trainer's resume). The check reads every
tensor once (``torch.isfinite``): well under a second for a 0.5B model on CPU.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ragen.errors import NonFiniteError


def nonfinite_tensors(named: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """Names of the floating-point tensors in ``named`` that hold a NaN or an inf."""
    bad = []
    for name, tensor in named:
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad.append(name)
    return bad


def model_tensors(model: torch.nn.Module) -> Iterable[tuple[str, torch.Tensor]]:
    """Parameters and buffers of ``model`` (tied weights once)."""
    seen: set[int] = set()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            yield name, tensor.detach()


def check_finite_weights(model: torch.nn.Module, where: str, fix: str) -> None:
    """Raise :class:`NonFiniteError` naming ``where``, the count and the first tensors when
    any weight of ``model`` is NaN or inf; ``fix`` says what to do instead."""
    tensors = list(model_tensors(model))
    bad = nonfinite_tensors(tensors)
    if bad:
        shown = ", ".join(bad[:3]) + (f", ... {len(bad) - 3} more" if len(bad) > 3 else "")
        raise NonFiniteError(
            f"{where}: {len(bad)} of {len(tensors)} weight tensors hold NaN or inf ({shown}). "
            f"Fix: {fix}"
        )
