"""Masked statistics over ``(batch, seq)`` tensors, plus the small input checks shared by
``ragen.algo``.

Every function here is pure (never writes into its inputs) and computes in at least
float32: bfloat16/float16 inputs are upcast first, because means and variances of
thousands of tokens lose most of their digits in 8-bit-mantissa arithmetic. float64
inputs stay float64 (useful for exact reference tests).

``mask`` is anything whose nonzero entries mark the positions that count (bool, int or
float 0/1); a float mask with other values acts as per-position weights.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "compute_dtype",
]


# --------------------------------------------------------------------------- checks


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype ``ragen.algo`` computes in for ``x``: float64 stays, everything else -> float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def as_float(x: Tensor) -> Tensor:
    """``x`` in its compute dtype (a no-op view when it already is one)."""
    return x.to(compute_dtype(x))


def check_tensor(name: str, x: object, ndim: int | None = None) -> Tensor:
    """Raise ``TypeError``/``ValueError`` with a one-line fix unless ``x`` is a tensor of ``ndim``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(
            f"{name} must have {ndim} dims, got shape {tuple(x.shape)}"
            + (" (use shape (batch, seq))" if ndim == 2 else "")
        )
    return x


def check_same_shape(**tensors: Tensor) -> None:
    """Raise ``ValueError`` naming the tensors unless all shapes are equal."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{n}={s}" for n, s in shapes.items())
        raise ValueError(f"shape mismatch: {listed}; all must be the same (batch, seq) shape")


def as_bool_mask(name: str, mask: Tensor, shape: torch.Size | tuple[int, ...]) -> Tensor:
    """``mask != 0`` as a bool tensor, after checking its shape."""
    check_tensor(name, mask)
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(mask.shape)}, expected {tuple(shape)}")
    return mask if mask.dtype == torch.bool else mask != 0


def check_fraction(name: str, value: float, low: float = 0.0, high: float = 1.0) -> float:
    """Return ``float(value)`` after checking ``low <= value <= high`` (and that it is finite)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v) or not low <= v <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
    return v


# --------------------------------------------------------------------------- statistics


def _weights(values: Tensor, mask: Tensor) -> Tensor:
    if tuple(mask.shape) != tuple(values.shape):
        raise ValueError(
            f"mask shape {tuple(mask.shape)} does not match values shape {tuple(values.shape)}"
        )
    return mask.to(compute_dtype(values))


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """sum_i values_i m_i / sum_i m_i (0 where the mask is empty, instead of NaN).

    Shapes: values, mask ``(...)`` -> 0-d tensor, or ``(...)`` with ``dim`` removed.
    """
    w = _weights(values, mask)
    total = as_float(values) * w
    if dim is None:
        return total.sum() / w.sum().clamp_min(1e-8)
    return total.sum(dim) / w.sum(dim).clamp_min(1e-8)


def masked_var(values: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of the masked entries (over all dims); returns a 0-d tensor.

    var = sum_i m_i (x_i - mean)^2 / sum_i m_i, times n / (n - 1) when ``unbiased``
    (Bessel's correction, n = sum_i m_i). With n <= 1 the correction is skipped, so one
    entry gives variance 0 rather than NaN or an error.
    """
    w = _weights(values, mask)
    x = as_float(values)
    mean = masked_mean(x, w)
    var = masked_mean((x - mean) ** 2, w)
    if unbiased:
        n = w.sum()
        var = torch.where(n > 1, var * n / (n - 1).clamp_min(1e-8), var)
    return var


def masked_whiten(
    values: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8
) -> Tensor:
    """Standardize the masked entries: (x - mean) / sqrt(var + eps), stats over mask only.

    With ``shift_mean=False`` the mean is added back (only the scale changes), as PPO
    implementations do for advantages whose sign matters. The variance is the unbiased
    one (``masked_var``). Positions outside the mask are set to 0 in the output (they
    carry no meaning and zeros keep later masked sums exact).

    Shapes: values, mask ``(...)`` -> ``(...)`` (float32, or float64 for float64 input).
    """
    w = _weights(values, mask)
    x = as_float(values)
    mean = masked_mean(x, w)
    var = masked_var(x, w)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * (w != 0)
