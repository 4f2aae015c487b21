"""StarPO-S uncertainty filtering: keep the prompt groups whose rewards disagree most.

A group whose rollouts all score the same carries no learning signal for a group-relative
baseline and, per the RAGEN paper, training on low-variance groups drives the echo-trap
collapse. The filter scores each group by the in-group standard deviation of the *raw*
episode scores (pass the scores before any normalization; this function never modifies
its input), ``ragen.algo.groups.group_reward_std`` -- the same statistic the
``group_reward_std`` rollout metric reports -- and keeps whole groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ragen.algo.groups import as_group_ids, group_reward_std
from ragen.algo.utils import as_float

__all__ = ["filter_groups", "FILTER_STRATEGIES"]

FILTER_STRATEGIES = ("top_p", "top_k", "min_std")


@torch.no_grad()
def filter_groups(
    scores: Tensor | Sequence[float],
    index,
    strategy: str = "top_p",
    value: float = 0.25,
    include_zero: bool = True,
    episode_ids=None,
) -> tuple[Tensor, dict[str, float]]:
    """Which samples to keep, by the reward std of their group -> ``(keep_mask, metrics)``.

    std_g = ``group_reward_std``: the population standard deviation of the scores of the
    EPISODES of group g (0 for a group of one, and exactly 0 when all scores are equal).
    With a windowed context every turn is a sample: pass ``episode_ids`` so an episode
    counts once, whatever its number of turns (without them every sample is an episode).

    Strategies (G = number of groups):
      * ``top_p``: keep the ceil(value * G) groups with the highest std, at least 1
        (``0 < value <= 1``; the paper keeps 0.25, i.e. filters 75%).
      * ``top_k``: keep the ``value`` groups with the highest std (``value`` >= 1, an
        integer; more than G keeps all).
      * ``min_std``: keep groups with std_g >= ``value``.
    ``include_zero=False`` additionally drops every zero-std group, even if that leaves
    nothing (then keep_mask is all False; the caller decides whether to skip the step).

    Ties in std are broken by first appearance of the group in the batch: of two groups
    with equal std, the one whose first sample comes earlier is kept.

    Args:
        scores: ``(B,)`` raw trajectory scores.
        index: ``(B,)`` group ids (tensor, numpy array or list of ints/strings).
        episode_ids: optional ``(B,)`` episode ids (samples of one episode must have
            the same score: pass episode scores).
    Returns:
        keep_mask: ``(B,)`` bool, True for samples of kept groups.
        metrics (python floats): ``std_mean_before``/``std_max_before`` (over all groups),
        ``std_mean_after``/``std_max_after`` (over kept groups; 0 if none),
        ``kept_group_frac``, ``kept_sample_frac``, ``num_groups``, ``num_groups_kept``.
    """
    if strategy not in FILTER_STRATEGIES:
        raise ValueError(
            f"unknown filter strategy {strategy!r}; choose one of {', '.join(FILTER_STRATEGIES)}"
        )
    s = as_float(scores if isinstance(scores, Tensor) else torch.as_tensor(scores))
    if s.dim() != 1:
        raise ValueError(f"scores must be 1-D (one score per sample), got {tuple(s.shape)}")
    ids, num_groups = as_group_ids(index, s.shape[0], s.device)
    std = group_reward_std(s, ids, episode_ids)  # same group numbering as ids

    if strategy == "min_std":
        keep_group = std >= float(value)
    else:
        if strategy == "top_p":
            if not 0.0 < float(value) <= 1.0:
                raise ValueError(
                    f"top_p keeps a fraction of groups: value must be in (0, 1], got {value!r}"
                )
            num_keep = max(1, math.ceil(float(value) * num_groups - 1e-9))
        else:
            if float(value) != int(value) or int(value) < 1:
                raise ValueError(
                    f"top_k keeps a number of groups: value must be an integer >= 1, got {value!r}"
                )
            num_keep = int(value)
        # Stable sort on -std: equal stds keep the first-appearance order of group ids.
        order = torch.sort(-std, stable=True).indices
        keep_group = torch.zeros(num_groups, dtype=torch.bool, device=s.device)
        keep_group[order[: min(num_keep, num_groups)]] = True
    if not include_zero:
        keep_group &= std > 0
    keep_mask = keep_group[ids]

    kept_std = std[keep_group]
    metrics = {
        "std_mean_before": float(std.mean()) if num_groups else 0.0,
        "std_max_before": float(std.max()) if num_groups else 0.0,
        "std_mean_after": float(kept_std.mean()) if kept_std.numel() else 0.0,
        "std_max_after": float(kept_std.max()) if kept_std.numel() else 0.0,
        "kept_group_frac": float(keep_group.float().mean()) if num_groups else 0.0,
        "kept_sample_frac": float(keep_mask.float().mean()) if s.numel() else 0.0,
        "num_groups": float(num_groups),
        "num_groups_kept": float(keep_group.sum()),
    }
    return keep_mask, metrics
