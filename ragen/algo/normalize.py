"""Score normalization before advantage estimation (RAGEN's ARPO / BRPO / GRPO choices).

``normalize_scores(scores, index, grouping, method)``:

=========  ==============================================================
grouping   which samples share statistics
=========  ==============================================================
state      samples of the same group (same initial state, ``index``)
batch      the whole batch is one group
none       every sample is its own group (only ``identity`` makes sense)
=========  ==============================================================

=========  ==============================================================
method     per-sample output (mean, std over the sample's grouping)
=========  ==============================================================
identity   s (raw scores)
mean       s - mean
mean_std   (s - mean) / (std + epsilon)      std: sample (n-1) std
asym_clip  clamp((s - mean) / (std + epsilon), clip_low, clip_high)
=========  ==============================================================

Paper names: ARPO = (none, identity), BRPO = (batch, mean_std), GRPO = (state, mean_std).

``asym_clip`` (our definition): mean_std, then clamp to the asymmetric range
[-1, 3] by default. Sparse-success tasks (Sokoban, FrozenLake) have many failures and
rare successes; standardizing makes a rare success a large positive outlier, which the
wide upper bound keeps, while the narrow lower bound stops any single failure from
dominating the gradient. Change the range with ``clip_range=(low, high)``.

A grouping cell with one member has no spread: ``mean``/``mean_std``/``asym_clip`` give 0
there. ``state`` grouping where every group has one member raises ``ValueError`` (group
ids unique per sample are a classic silent bug).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ragen.algo.groups import as_group_ids, group_stats
from ragen.algo.outcome import require_real_groups
from ragen.algo.utils import as_float
from ragen.errors import ConfigError

__all__ = ["normalize_scores", "GROUPINGS", "METHODS"]

GROUPINGS = ("state", "batch", "none")
METHODS = ("identity", "mean", "mean_std", "asym_clip")


@torch.no_grad()
def normalize_scores(
    scores: Tensor | Sequence[float],
    index=None,
    grouping: str = "state",
    method: str = "mean_std",
    epsilon: float = 1e-6,
    clip_range: tuple[float, float] = (-1.0, 3.0),
) -> Tensor:
    """Normalize trajectory scores ``(B,)`` -> ``(B,)`` float32 (see module docstring).

    ``index`` (group ids, ``(B,)``) is required for ``grouping="state"``. The input is
    never modified; a new tensor is always returned.
    """
    if grouping not in GROUPINGS:
        raise ConfigError(f"unknown grouping {grouping!r}; choose one of {', '.join(GROUPINGS)}")
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    s = as_float(scores if isinstance(scores, Tensor) else torch.as_tensor(scores))
    if s.dim() != 1:
        raise ValueError(f"scores must be 1-D (one score per sample), got {tuple(s.shape)}")
    if method == "identity":
        return s.clone()
    batch = s.shape[0]
    if grouping == "state":
        if index is None:
            raise ValueError("grouping='state' needs index (the group id of each sample)")
        ids, num_groups = as_group_ids(index, batch, s.device)
    elif grouping == "batch":
        ids, num_groups = torch.zeros(batch, dtype=torch.long, device=s.device), min(batch, 1)
    else:
        ids, num_groups = torch.arange(batch, device=s.device), batch
    count, mean, std = group_stats(s, ids, num_groups)
    if grouping == "state":
        require_real_groups(count, f"normalize_scores(grouping='state', method={method!r})")
    out = s - mean[ids]
    if method in ("mean_std", "asym_clip"):
        out = out / (std[ids] + epsilon)
    if method == "asym_clip":
        low, high = (float(v) for v in clip_range)
        if not low <= 0.0 <= high:
            raise ConfigError(f"clip_range must satisfy low <= 0 <= high, got {clip_range}")
        out = out.clamp(low, high)
    return torch.where(count[ids] > 1, out, torch.zeros_like(out))
