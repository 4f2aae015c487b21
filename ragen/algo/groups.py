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

__all__ = ["as_group_ids", "group_stats", "group_reward_std", "scatter_sum"]


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


def group_stats(
    scores: Tensor, ids: Tensor, num_groups: int, unbiased: bool = True
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-group count, mean and standard deviation of ``scores``.

    For group g with n_g members: mean_g = sum s_i / n_g,
    std_g = sqrt( sum (s_i - mean_g)^2 / (n_g - 1) )  (``unbiased``, like ``torch.std``;
    the score normalization of GRPO), or / n_g (population std, ``unbiased=False``),
    computed in two passes for accuracy. A group of size 1 has std 0, and a group whose
    scores are all identical has std exactly 0 (detected with max == min, because the
    two-pass formula can leave ~1e-17 of rounding noise).

    Shapes: scores ``(B,)``, ids ``(B,)`` -> count, mean, std each ``(G,)``.
    """
    s = as_float(scores)
    count = scatter_sum(torch.ones_like(s), ids, num_groups)
    mean = scatter_sum(s, ids, num_groups) / count.clamp_min(1)
    sq_dev = scatter_sum((s - mean[ids]) ** 2, ids, num_groups)
    var = sq_dev / ((count - 1) if unbiased else count).clamp_min(1)
    g_max = torch.full_like(mean, -torch.inf).scatter_reduce(0, ids, s, reduce="amax")
    g_min = torch.full_like(mean, torch.inf).scatter_reduce(0, ids, s, reduce="amin")
    constant = (g_max == g_min) | (count <= 1)
    std = torch.where(constant, torch.zeros_like(var), var.sqrt())
    return count, mean, std


def group_reward_std(
    scores: Tensor | Sequence[float],
    index,
    episode_ids=None,
) -> Tensor:
    """The in-group reward std over EPISODES: the StarPO-S filter's ranking statistic and
    the ``group_reward_std`` rollout metric (echo-trap signal) -> ``(G,)``.

    std_g = sqrt( sum_{e in g} (s_e - mean_g)^2 / n_g ) over the n_g episodes e of group
    g, i.e. the POPULATION std (0 for a group of one; exactly 0 when all scores agree).

    Why over episodes: with a windowed context every turn is its own sample, and an
    episode with more turns would otherwise count more often in its group. Pass
    ``episode_ids`` ``(B,)`` and the samples of one episode count once (their scores must
    be equal: pass the episode score, e.g. ``episode_reward``, not a per-turn one).

    Why the population std (divide by n, not n - 1): the question is how much the
    rollouts that were actually drawn disagree, not an estimate of a larger population's
    spread, and the population std measures the same disagreement the same way at any
    group size: a group split half 0 / half 1 has std 0.5 with 2 episodes or with 8
    (the sample std gives 0.71 and 0.53), so a ``min_std`` threshold means the same for
    every group, and for rewards in [a, b] it never exceeds (b - a) / 2. Ranking groups of
    equal size is the same under either definition. (The GRPO score normalization,
    ``normalize_scores``, divides by the sample std; that is a different use.)

    Args:
        scores: ``(B,)`` raw scores, one per sample.
        index: ``(B,)`` group ids (tensor, numpy array or list of ints/strings).
        episode_ids: optional ``(B,)`` episode ids; episodes are told apart by the pair
            (group id, episode id).
    Returns:
        ``(G,)`` float32 (float64 for float64 scores and python sequences), groups
        numbered 0..G-1 by first appearance in ``index`` (as ``as_group_ids``).
    """
    # python floats are doubles: keep their digits
    s = (
        as_float(scores)
        if isinstance(scores, Tensor)
        else torch.tensor(scores, dtype=torch.float64)
    )
    if s.dim() != 1:
        raise ValueError(f"scores must be 1-D (one score per sample), got {tuple(s.shape)}")
    ids, num_groups = as_group_ids(index, s.shape[0], s.device)
    if episode_ids is not None:
        eps, num_eps = as_group_ids(episode_ids, s.shape[0], s.device)
        # one row per distinct (group, episode) pair: its first sample
        _, pair = torch.unique(ids * max(num_eps, 1) + eps, return_inverse=True)
        num_pairs = int(pair.max()) + 1 if pair.numel() else 0
        positions = torch.arange(pair.numel(), device=pair.device)
        first = torch.full((num_pairs,), pair.numel(), dtype=torch.long, device=pair.device)
        first = first.scatter_reduce(0, pair, positions, reduce="amin")
        if bool((s != s[first][pair]).any()):
            raise ValueError(
                "samples of one episode have different scores; pass the episode score "
                "(e.g. episode_reward) for every sample of an episode"
            )
        s, ids = s[first], ids[first]
    _, _, std = group_stats(s, ids, num_groups, unbiased=False)
    return std
