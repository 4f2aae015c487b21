"""Group ids and per-group statistics for group-relative estimators and filters.

A *group* is the set of samples rolled out from the same initial state (same env seed);
``index`` holds one group id per sample. Ids may be a 1-D integer tensor, a numpy array
or a list of ints or strings. They are relabelled to ``0..G-1`` in order of *first
appearance* in the batch, which is what makes tie-breaking elsewhere deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ragen.algo.utils import as_float

__all__ = ["as_group_ids", "group_stats", "scatter_sum"]


def _relabel_by_first_appearance(ids: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary integer ids ``(B,)`` to ``0..G-1`` ordered by first appearance."""
    unique, inverse = torch.unique(ids, return_inverse=True)  # sorted unique ids
    num_groups = unique.numel()
    positions = torch.arange(ids.numel(), device=ids.device)
    first = torch.full((num_groups,), ids.numel(), dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, positions, reduce="amin")
    rank = torch.empty_like(first)
    rank[torch.argsort(first)] = torch.arange(num_groups, device=ids.device)
    return rank[inverse], num_groups


def as_group_ids(
    index: Tensor | np.ndarray | Sequence[int] | Sequence[str],
    batch_size: int,
    device: torch.device | str | None = None,
) -> tuple[Tensor, int]:
    """Group ids ``(B,)`` int64 on ``device``, numbered 0..G-1 by first appearance, and G.

    Raises ``ValueError`` if ``index`` does not hold exactly ``batch_size`` ids and
    ``TypeError`` for unsupported id types (floats, nested lists).
    """
    if isinstance(index, Tensor):
        if index.dim() != 1:
            raise ValueError(
                f"index must be 1-D (one group id per sample), got {tuple(index.shape)}"
            )
        if index.dtype.is_floating_point or index.dtype.is_complex:
            raise TypeError(f"index must hold integer group ids, got dtype {index.dtype}")
        ids = index.to(device=device, dtype=torch.long)
    else:
        arr = np.asarray(index)
        if arr.ndim != 1:
            raise ValueError(f"index must be 1-D (one group id per sample), got shape {arr.shape}")
        if arr.dtype.kind in "iub":
            ids = torch.as_tensor(arr.astype(np.int64), device=device)
        elif arr.dtype.kind in "UOS":
            # Strings (e.g. "sokoban/seed=7"): numbered in Python, by first appearance.
            # This is the only per-sample loop in ragen.algo; it touches B ids, not tokens.
            numbering: dict[object, int] = {}
            codes = [numbering.setdefault(item, len(numbering)) for item in arr.tolist()]
            ids = torch.tensor(codes, dtype=torch.long, device=device)
        else:
            raise TypeError(
                f"index must hold ints or strings, got numpy dtype {arr.dtype}; "
                "pass the initial-state group id of each sample"
            )
    if ids.numel() != batch_size:
        raise ValueError(
            f"index has {ids.numel()} group ids but the batch has {batch_size} samples"
        )
    if batch_size == 0:
        return ids, 0
    return _relabel_by_first_appearance(ids)


def scatter_sum(values: Tensor, ids: Tensor, num_groups: int) -> Tensor:
    """Per-group sums: out[g] = sum_{i: ids_i = g} values_i.  ``(B,), (B,) -> (G,)``."""
    out = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    return out.index_add(0, ids, values)


def group_stats(scores: Tensor, ids: Tensor, num_groups: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per-group count, mean and sample standard deviation of ``scores``.

    For group g with n_g members: mean_g = sum s_i / n_g,
    std_g = sqrt( sum (s_i - mean_g)^2 / (n_g - 1) )  (unbiased, like ``torch.std``),
    computed in two passes for accuracy. A group of size 1 has std 0, and a group whose
    scores are all identical has std exactly 0 (detected with max == min, because the
    two-pass formula can leave ~1e-17 of rounding noise).

    Shapes: scores ``(B,)``, ids ``(B,)`` -> count, mean, std each ``(G,)``.
    """
    s = as_float(scores)
    count = scatter_sum(torch.ones_like(s), ids, num_groups)
    mean = scatter_sum(s, ids, num_groups) / count.clamp_min(1)
    sq_dev = scatter_sum((s - mean[ids]) ** 2, ids, num_groups)
    var = sq_dev / (count - 1).clamp_min(1)
    g_max = torch.full_like(mean, -torch.inf).scatter_reduce(0, ids, s, reduce="amax")
    g_min = torch.full_like(mean, torch.inf).scatter_reduce(0, ids, s, reduce="amin")
    constant = (g_max == g_min) | (count <= 1)
    std = torch.where(constant, torch.zeros_like(var), var.sqrt())
    return count, mean, std
