"""StarPO-S uncertainty filtering: keep the prompt groups whose rollouts disagree most.

A group whose rollouts all score the same carries no learning signal for a group-relative
baseline and, per the RAGEN paper, training on low-variance groups drives the echo-trap
collapse. The filter ranks each group by a metric -- by default the in-group standard
deviation of the *raw* episode scores (pass the scores before any normalization; this
function never modifies its input), ``ragen.algo.groups.group_reward_std``, the same
statistic the ``group_reward_std`` rollout metric reports -- and keeps whole groups.

RAGEN-2's variants are strategies (how many of the ranked groups to keep) times ranking
metrics (what to rank by); see :func:`filter_groups`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ragen.algo.groups import as_group_ids, group_reward_std, scatter_sum
from ragen.algo.utils import as_float
from ragen.errors import ConfigError

__all__ = ["filter_groups", "group_metric", "FILTER_STRATEGIES", "FILTER_METRICS"]

# top_p, top_k, min_std: the original StarPO-S filter (kept with their meaning);
# nucleus, min_p, threshold: RAGEN-2's mass- and max-relative variants.
FILTER_STRATEGIES = ("top_p", "top_k", "nucleus", "min_p", "threshold", "min_std")
# reward_std / reward_var: in-group spread of raw scores; reward: group mean score;
# entropy / length: group mean of a per-sample value the caller supplies.
FILTER_METRICS = ("reward_std", "reward_var", "reward", "entropy", "length")
SAMPLE_VALUE_METRICS = ("entropy", "length")


def group_metric(
    metric: str,
    scores: Tensor,
    ids: Tensor,
    num_groups: int,
    episode_ids=None,
    sample_values: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The ranking metric of each group -> ``(m, std)``, both ``(G,)`` float.

    ``ids``: ``(B,)`` group ids already numbered ``0..G-1`` (:func:`as_group_ids`).
    With ``n_g`` samples in group g and ``std_g`` = ``group_reward_std``:

      * ``reward_std``: m_g = std_g;  ``reward_var``: m_g = std_g ** 2
      * ``reward``: m_g = (1/n_g) sum_{i in g} scores_i
      * ``entropy`` / ``length``: m_g = (1/n_g) sum_{i in g} sample_values_i, where
        ``sample_values`` ``(B,)`` is each sample's mean token entropy (or surprisal) /
        its response length in tokens.

    ``std`` is returned as well: ``include_zero`` always refers to the reward spread.
    """
    if metric not in FILTER_METRICS:
        raise ConfigError(
            f"unknown filter metric {metric!r}; choose one of {', '.join(FILTER_METRICS)}"
        )
    std = group_reward_std(scores, ids, episode_ids)
    if metric == "reward_std":
        return std, std
    if metric == "reward_var":
        return std * std, std
    counts = scatter_sum(torch.ones_like(scores), ids, num_groups).clamp(min=1)
    if metric == "reward":
        return scatter_sum(scores, ids, num_groups) / counts, std
    if sample_values is None:
        raise ValueError(f"filter metric {metric!r} needs sample_values (one per sample)")
    v = as_float(torch.as_tensor(sample_values)).to(scores.device)
    if v.shape != scores.shape:
        raise ValueError(
            f"sample_values must have one value per sample {tuple(scores.shape)}, got {tuple(v.shape)}"
        )
    return scatter_sum(v.to(scores.dtype), ids, num_groups) / counts, std


@torch.no_grad()
def filter_groups(
    scores: Tensor | Sequence[float],
    index,
    strategy: str = "top_p",
    value: float = 0.25,
    include_zero: bool = True,
    episode_ids=None,
    metric: str = "reward_std",
    sample_values: Tensor | Sequence[float] | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Which samples to keep, by a metric of their group -> ``(keep_mask, metrics)``.

    std_g = ``group_reward_std``: the population standard deviation of the scores of the
    EPISODES of group g (0 for a group of one, and exactly 0 when all scores are equal).
    With a windowed context every turn is a sample: pass ``episode_ids`` so an episode
    counts once, whatever its number of turns (without them every sample is an episode).
    Groups are ranked by m_g = ``group_metric(metric, ...)`` (default ``reward_std``:
    m_g = std_g; ``entropy`` and ``length`` need ``sample_values``, ``(B,)``).

    Strategies (G = number of groups, m_(1) >= m_(2) >= ... the sorted metric):
      * ``top_p``: keep the ceil(value * G) groups with the highest m, at least 1
        (``0 < value <= 1``; the paper keeps 0.25, i.e. filters 75%).
      * ``top_k``: keep the ``value`` groups with the highest m (absolute top-k:
        ``value`` >= 1, an integer; more than G keeps all).
      * ``nucleus``: keep the smallest prefix m_(1..k) whose mass reaches ``value`` of the
        total, sum_{r<=k} m_(r) >= value * sum_g m_g (``0 < value <= 1``; m >= 0 needed,
        so not with ``reward`` when rewards can be negative). At least one group; all
        groups when the total is 0.
      * ``min_p``: keep groups with m_g >= value * max_g m_g (``0 <= value <= 1``).
      * ``threshold``: keep groups with m_g >= ``value`` (an absolute bar).
      * ``min_std``: the original name of ``threshold`` with ``reward_std``.
    ``include_zero=False`` additionally drops every zero-std group, even if that leaves
    nothing (then keep_mask is all False; the caller decides whether to skip the step).

    Ties in m are broken by first appearance of the group in the batch: of two groups
    with equal m, the one whose first sample comes earlier is kept.

    Args:
        scores: ``(B,)`` raw trajectory scores.
        index: ``(B,)`` group ids (tensor, numpy array or list of ints/strings).
        episode_ids: optional ``(B,)`` episode ids (samples of one episode must have
            the same score: pass episode scores).
        metric: one of :data:`FILTER_METRICS`.
        sample_values: ``(B,)`` per-sample values for ``entropy`` / ``length``.
    Returns:
        keep_mask: ``(B,)`` bool, True for samples of kept groups.
        metrics (python floats): ``std_mean_before``/``std_max_before`` (over all groups),
        ``std_mean_after``/``std_max_after`` (over kept groups; 0 if none),
        ``kept_group_frac``, ``kept_sample_frac``, ``num_groups``, ``num_groups_kept``,
        and ``metric_mean_before`` / ``metric_mean_after`` for the ranking metric.
    """
    if strategy not in FILTER_STRATEGIES:
        raise ConfigError(
            f"unknown filter strategy {strategy!r}; choose one of {', '.join(FILTER_STRATEGIES)}"
        )
    s = as_float(scores if isinstance(scores, Tensor) else torch.as_tensor(scores))
    if s.dim() != 1:
        raise ValueError(f"scores must be 1-D (one score per sample), got {tuple(s.shape)}")
    ids, num_groups = as_group_ids(index, s.shape[0], s.device)
    if strategy == "min_std" and metric != "reward_std":
        raise ConfigError("min_std thresholds the reward std; use 'threshold' with other metrics")
    m, std = group_metric(metric, s, ids, num_groups, episode_ids, sample_values)

    v = float(value)
    if strategy in ("min_std", "threshold"):
        keep_group = m >= v
    elif strategy == "min_p":
        if not 0.0 <= v <= 1.0:
            raise ConfigError(
                f"min_p keeps groups above value * max: value must be in [0, 1], got {value!r}"
            )
        keep_group = m >= v * m.max() if num_groups else m > 0
    else:
        # Stable sort on -m: equal metrics keep the first-appearance order of group ids.
        order = torch.sort(-m, stable=True).indices
        if strategy == "top_p":
            if not 0.0 < v <= 1.0:
                raise ConfigError(
                    f"top_p keeps a fraction of groups: value must be in (0, 1], got {value!r}"
                )
            num_keep = max(1, math.ceil(v * num_groups - 1e-9))
        elif strategy == "top_k":
            if v != int(value) or int(value) < 1:
                raise ConfigError(
                    f"top_k keeps a number of groups: value must be an integer >= 1, got {value!r}"
                )
            num_keep = int(value)
        else:  # nucleus
            if not 0.0 < v <= 1.0:
                raise ConfigError(
                    f"nucleus keeps a share of the metric's mass: value must be in (0, 1], got {value!r}"
                )
            if num_groups and bool((m < 0).any()):
                raise ConfigError(
                    f"nucleus needs a non-negative metric; {metric!r} has negative groups "
                    "(use top_p or min_p, or rank by reward_std)"
                )
            total = float(m.sum()) if num_groups else 0.0
            if total <= 0:
                num_keep = num_groups  # no mass anywhere: nothing to prefer
            else:
                cum = torch.cumsum(m[order].double(), 0)
                # the first rank whose cumulative mass reaches the share (1e-9: rounding)
                num_keep = int((cum < v * total - 1e-9 * total).sum()) + 1
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
        "metric_mean_before": float(m.mean()) if num_groups else 0.0,
        "metric_mean_after": float(m[keep_group].mean()) if bool(keep_group.any()) else 0.0,
    }
    return keep_mask, metrics
