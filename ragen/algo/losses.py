"""Policy and value losses and their aggregation over ``(batch, seq)`` token matrices.

All losses compute in float32 (bfloat16 log-probs are upcast: exp of a log-ratio needs
the mantissa) and return a differentiable 0-d loss plus a dict of python-float metrics.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ragen.algo.utils import as_float, check_same_shape, check_tensor, masked_mean, masked_var

__all__ = [
    "LOSS_AGG_MODES",
    "agg_loss",
    "ppo_policy_loss",
    "value_loss",
    "explained_variance",
]

LOSS_AGG_MODES = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)

# exp(20) ~ 5e8: far past any clip range, yet finite in float32 (and its gradient too).
_MAX_LOG_RATIO = 20.0


def agg_loss(
    loss_mat: Tensor,
    loss_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    norm_constant: float | None = None,
) -> Tensor:
    """Aggregate a per-token loss ``(B, T)`` over the tokens of ``loss_mask`` -> 0-d tensor.

    With L the loss, M the mask, S = {i : sum_t M_it > 0} the sequences with any token:

    * ``token-mean``:              sum_it L M / sum_it M   (every token weighs the same)
    * ``seq-mean-token-sum``:      mean_{i in S} sum_t L_it M_it
    * ``seq-mean-token-mean``:     mean_{i in S} (sum_t L_it M_it / sum_t M_it)
      (every sequence weighs the same; the original GRPO)
    * ``seq-mean-token-sum-norm``: sum_it L M / (B * N), N = ``norm_constant`` or T
      (Dr.GRPO: a constant normalizer, so a sample's weight does not depend on its
      length; B counts all rows, also empty ones, to keep the normalizer constant).

    Empty sequences never dilute the ``seq-mean`` modes; an all-empty mask gives 0.
    Unknown modes raise ``ValueError`` listing the valid ones.
    """
    check_tensor("loss_mat", loss_mat, ndim=2)
    check_same_shape(loss_mat=loss_mat, loss_mask=loss_mask)
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(
            f"unknown loss_agg_mode {loss_agg_mode!r}; choose one of {', '.join(LOSS_AGG_MODES)}"
        )
    loss = as_float(loss_mat)
    mask = loss_mask.to(loss.dtype)
    if loss_agg_mode == "token-mean":
        return masked_mean(loss, mask)
    token_sum = (loss * mask).sum(-1)  # (B,)
    if loss_agg_mode == "seq-mean-token-sum-norm":
        norm = loss.shape[-1] if norm_constant is None else float(norm_constant)
        if norm <= 0:
            raise ValueError(f"norm_constant must be > 0, got {norm_constant!r}")
        return token_sum.sum() / (loss.shape[0] * norm)
    num_tokens = mask.sum(-1)
    has_tokens = (num_tokens > 0).to(loss.dtype)
    if loss_agg_mode == "seq-mean-token-mean":
        token_sum = token_sum / num_tokens.clamp_min(1)
    return (token_sum * has_tokens).sum() / has_tokens.sum().clamp_min(1)


def ppo_policy_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate with decoupled clip range and dual clip.

        r_t   = exp(log_prob - old_log_prob)     (log-ratio clamped to +-20 for safety)
        L_t   = max(-A_t r_t, -A_t clip(r_t, 1 - clip_ratio_low, 1 + clip_ratio_high))
        L_t   = min(L_t, -A_t c)  where A_t < 0  (dual clip, c = clip_ratio_c > 1)
        loss  = agg_loss(L, response_mask, loss_agg_mode)

    StarPO-S uses the decoupled ("clip-higher") range clip_ratio_low 0.2 / high 0.28.

    Args:
        old_log_prob, log_prob, advantages, response_mask: ``(B, T)``; only ``log_prob``
        needs a gradient.
    Returns:
        loss: 0-d float32 tensor, differentiable w.r.t. ``log_prob``.
        metrics (python floats, means over response tokens):
          ``pg_clipfrac``: fraction where the clipped branch is active (strictly larger),
          ``pg_clipfrac_lower``: fraction where the dual clip is active (A < 0 and
          the clipped loss exceeds -A c),
          ``ppo_kl``: mean of old_log_prob - log_prob (approximate KL(old || new)).
    """
    check_tensor("log_prob", log_prob, ndim=2)
    check_same_shape(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
    )
    if not 0.0 <= clip_ratio_low < 1.0:
        raise ValueError(f"clip_ratio_low must be in [0, 1), got {clip_ratio_low!r}")
    if clip_ratio_high < 0.0:
        raise ValueError(f"clip_ratio_high must be >= 0, got {clip_ratio_high!r}")
    if not clip_ratio_c > 1.0:
        raise ValueError(f"clip_ratio_c (dual clip) must be > 1, got {clip_ratio_c!r}")
    mask = response_mask != 0
    adv = as_float(advantages).detach()
    log_ratio = (as_float(log_prob) - as_float(old_log_prob).detach()).clamp(
        -_MAX_LOG_RATIO, _MAX_LOG_RATIO
    )
    ratio = torch.exp(log_ratio)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    loss_max = torch.maximum(loss_unclipped, loss_clipped)
    loss_dual = -adv * clip_ratio_c
    negative = adv < 0
    pg_losses = torch.where(negative, torch.minimum(loss_max, loss_dual), loss_max)
    loss = agg_loss(pg_losses, mask, loss_agg_mode)
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": float(masked_mean((loss_clipped > loss_unclipped).float(), mask)),
            "pg_clipfrac_lower": float(
                masked_mean(((loss_max > loss_dual) & negative).float(), mask)
            ),
            "ppo_kl": float(masked_mean(-log_ratio, mask)),
        }
    return loss, metrics


def value_loss(
    vpreds: Tensor,
    returns: Tensor,
    old_values: Tensor,
    response_mask: Tensor,
    cliprange_value: float | None = 0.5,
    loss_agg_mode: str = "token-mean",
) -> tuple[Tensor, dict[str, float]]:
    """Clipped value loss: 0.5 * agg( max((v - R)^2, (clip(v, v_old - c, v_old + c) - R)^2) ).

    ``cliprange_value=None`` disables clipping (plain 0.5 * squared error).

    Shapes: all ``(B, T)``. Returns the 0-d loss (differentiable w.r.t. ``vpreds``) and
    metrics (python floats): ``vf_clipfrac`` (fraction of tokens where the clipped term
    is strictly larger) and ``vpred_mean``.
    """
    check_tensor("vpreds", vpreds, ndim=2)
    check_same_shape(
        vpreds=vpreds, returns=returns, old_values=old_values, response_mask=response_mask
    )
    mask = response_mask != 0
    v = as_float(vpreds)
    target = as_float(returns).detach()
    old = as_float(old_values).detach()
    loss_unclipped = (v - target) ** 2
    if cliprange_value is None:
        loss_clipped = loss_unclipped
    else:
        if cliprange_value < 0:
            raise ValueError(f"cliprange_value must be >= 0 or None, got {cliprange_value!r}")
        v_clipped = old + (v - old).clamp(-cliprange_value, cliprange_value)
        loss_clipped = (v_clipped - target) ** 2
    loss = 0.5 * agg_loss(torch.maximum(loss_unclipped, loss_clipped), mask, loss_agg_mode)
    with torch.no_grad():
        metrics = {
            "vf_clipfrac": float(masked_mean((loss_clipped > loss_unclipped).float(), mask)),
            "vpred_mean": float(masked_mean(v, mask)),
        }
    return loss, metrics


@torch.no_grad()
def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """1 - Var[R - V] / Var[R] over the masked tokens -> 0-d tensor (NaN when Var[R] < 1e-8).

    1 means the critic predicts returns perfectly, 0 means no better than a constant,
    negative means worse than a constant.
    """
    check_same_shape(values=values, returns=returns, mask=mask)
    r = as_float(returns)
    var_r = masked_var(r, mask)
    var_resid = masked_var(r - as_float(values), mask)
    # Returns that are constant up to float noise (e.g. every episode earned -0.1) have no
    # variance to explain; dividing by ~1e-15 would report absurd values like -7e10.
    defined = var_r > 1e-8
    return torch.where(
        defined, 1.0 - var_resid / var_r.clamp_min(1e-8), torch.full_like(var_r, float("nan"))
    )
