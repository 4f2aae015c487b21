"""Policy and value losses and their aggregation over ``(batch, seq)`` token matrices.

All losses compute in float32 (bfloat16 log-probs are upcast: exp of a log-ratio needs
the mantissa) and return a differentiable 0-d loss plus a dict of python-float metrics.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ragen.algo.registry import register_policy_loss
from ragen.algo.utils import as_float, check_same_shape, check_tensor, masked_mean, masked_var
from ragen.errors import ConfigError

__all__ = [
    "LOSS_AGG_MODES",
    "agg_denominator",
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


def agg_denominator(
    loss_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    norm_constant: float | None = None,
) -> float:
    """The denominator D of ``agg_loss`` over a whole (mini)batch ``loss_mask`` ``(B, T)``.

    With M the mask:

    * ``token-mean``:              D = sum_it M_it                  (tokens)
    * ``seq-mean-token-sum``,
      ``seq-mean-token-mean``:     D = |{i : sum_t M_it > 0}|       (rows with any token)
    * ``seq-mean-token-sum-norm``: D = B * ``norm_constant``         (all rows x budget)

    Compute it ONCE over the minibatch and pass it to ``agg_loss(..., denominator=D)``
    for each micro-batch: every mode's loss is (sum of per-row numerators) / D, so the
    micro-batch losses then add up to the minibatch loss, and their gradients to its
    gradient, however the rows are split and padded. (Dividing each micro-batch by its
    own D and re-weighting afterwards cannot be exact in general: the micro-batch's own
    T, token count or row count is not the minibatch's.)

    Returns a python float (one host sync per minibatch); 0.0 for an empty mask.
    ``seq-mean-token-sum-norm`` requires ``norm_constant`` (see ``agg_loss``).
    """
    return float(_denominator(loss_mask, loss_agg_mode, norm_constant))


def agg_loss(
    loss_mat: Tensor,
    loss_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    norm_constant: float | None = None,
    denominator: float | None = None,
) -> Tensor:
    """Aggregate a per-token loss ``(B, T)`` over the tokens of ``loss_mask`` -> 0-d tensor.

    Every mode is (sum over rows of a per-row numerator) / D. With L the loss, M the
    mask, S = {i : sum_t M_it > 0} the rows with any token, N = ``norm_constant``:

    * ``token-mean``:              sum_it L_it M_it                     / sum_it M_it
    * ``seq-mean-token-sum``:      sum_it L_it M_it                     / |S|
    * ``seq-mean-token-mean``:     sum_{i in S} (sum_t L_it M_it / sum_t M_it) / |S|
    * ``seq-mean-token-sum-norm``: sum_it L_it M_it                     / (B * N)

    ``token-mean`` weighs every token the same; the ``seq-mean`` modes every sequence
    (``seq-mean-token-mean`` is the original GRPO); ``seq-mean-token-sum-norm`` is
    Dr.GRPO: a constant normalizer N, the response-length budget (not the batch's
    longest row, which would make a sample's weight depend on what else is in the
    batch), and B counts all rows, also empty ones, so D depends only on the batch size.
    ``norm_constant`` is required for that mode (``ValueError`` naming it otherwise) and
    ignored by the others. Empty rows never dilute the ``seq-mean`` modes.

    ``denominator``: None -> D of this batch (the whole batch is one minibatch). Given
    (a float, normally ``agg_denominator`` of the whole minibatch), the result is this
    micro-batch's numerator / ``denominator``, so micro-batch losses sum to the minibatch
    loss; ``norm_constant`` is then not needed. A zero D gives a 0 loss (empty mask).
    Unknown modes raise ``ValueError`` listing the valid ones.
    """
    check_tensor("loss_mat", loss_mat, ndim=2)
    check_same_shape(loss_mat=loss_mat, loss_mask=loss_mask)
    _check_mode(loss_agg_mode)
    loss = as_float(loss_mat)
    mask = loss_mask.to(loss.dtype)
    if loss_agg_mode == "seq-mean-token-mean":
        row = (loss * mask).sum(-1) / mask.sum(-1).clamp_min(1)  # 0 for empty rows
        numerator = row.sum()
    else:
        numerator = (loss * mask).sum()
    if denominator is None:
        den = _denominator(loss_mask, loss_agg_mode, norm_constant).to(loss.dtype)
        # an empty mask has numerator 0: return 0 (with a graph), not 0 / 0
        return numerator / torch.where(den > 0, den, torch.ones_like(den))
    den = float(denominator)
    if not den >= 0 or not math.isfinite(den):
        raise ValueError(
            f"denominator must be a finite number >= 0 (use agg_denominator), got {denominator!r}"
        )
    return numerator / den if den > 0 else numerator * 0.0


def _check_mode(loss_agg_mode: str) -> None:
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ConfigError(
            f"unknown loss_agg_mode {loss_agg_mode!r}; choose one of {', '.join(LOSS_AGG_MODES)}"
        )


def _check_norm_constant(norm_constant: float | None) -> float:
    if norm_constant is None:
        raise ValueError(
            "loss_agg_mode 'seq-mean-token-sum-norm' (Dr.GRPO) divides by a fixed "
            "response-length budget: pass norm_constant= (the response tokens one sample "
            "may hold, e.g. max_new_tokens x turns per sample; algo.loss_norm_constant)"
        )
    try:
        norm = float(norm_constant)
    except (TypeError, ValueError):
        raise TypeError(f"norm_constant must be a number, got {norm_constant!r}") from None
    if not norm > 0 or not math.isfinite(norm):
        raise ConfigError(f"norm_constant must be a finite number > 0, got {norm_constant!r}")
    return norm


def _denominator(loss_mask: Tensor, loss_agg_mode: str, norm_constant: float | None) -> Tensor:
    """``agg_denominator`` as a 0-d float tensor on the mask's device (no host sync)."""
    _check_mode(loss_agg_mode)
    check_tensor("loss_mask", loss_mask, ndim=2)
    mask = loss_mask.to(torch.float64 if loss_mask.dtype == torch.float64 else torch.float32)
    if loss_agg_mode == "token-mean":
        return mask.sum()
    if loss_agg_mode == "seq-mean-token-sum-norm":
        return mask.new_tensor(loss_mask.shape[0] * _check_norm_constant(norm_constant))
    return (mask.sum(-1) != 0).to(mask.dtype).sum()


@register_policy_loss("ppo")
def ppo_policy_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    norm_constant: float | None = None,
    denominator: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate with decoupled clip range and dual clip.

        r_t   = exp(log_prob - old_log_prob)     (log-ratio clamped to +-20 for safety)
        L_t   = max(-A_t r_t, -A_t clip(r_t, 1 - clip_ratio_low, 1 + clip_ratio_high))
        L_t   = min(L_t, -A_t c)  where A_t < 0  (dual clip, c = clip_ratio_c > 1)
        loss  = agg_loss(L, response_mask, loss_agg_mode, norm_constant, denominator)

    StarPO-S uses the decoupled ("clip-higher") range clip_ratio_low 0.2 / high 0.28.

    Args:
        old_log_prob, log_prob, advantages, response_mask: ``(B, T)``; only ``log_prob``
        needs a gradient.
        loss_agg_mode, norm_constant, denominator: as in ``agg_loss`` (pass the
        minibatch's ``agg_denominator`` so that micro-batch losses add up).
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
        raise ConfigError(f"clip_ratio_low must be in [0, 1), got {clip_ratio_low!r}")
    if clip_ratio_high < 0.0:
        raise ConfigError(f"clip_ratio_high must be >= 0, got {clip_ratio_high!r}")
    if not clip_ratio_c > 1.0:
        raise ConfigError(f"clip_ratio_c (dual clip) must be > 1, got {clip_ratio_c!r}")
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
    loss = agg_loss(pg_losses, mask, loss_agg_mode, norm_constant, denominator)
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
    norm_constant: float | None = None,
    denominator: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped value loss: 0.5 * agg( max((v - R)^2, (clip(v, v_old - c, v_old + c) - R)^2) ).

    ``cliprange_value=None`` disables clipping (plain 0.5 * squared error).
    ``loss_agg_mode``, ``norm_constant``, ``denominator``: as in ``agg_loss``.

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
            raise ConfigError(f"cliprange_value must be >= 0 or None, got {cliprange_value!r}")
        v_clipped = old + (v - old).clamp(-cliprange_value, cliprange_value)
        loss_clipped = (v_clipped - target) ** 2
    loss = 0.5 * agg_loss(
        torch.maximum(loss_unclipped, loss_clipped), mask, loss_agg_mode, norm_constant, denominator
    )
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
