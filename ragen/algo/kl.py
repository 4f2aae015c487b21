"""KL regularization toward a reference policy: per-token estimators and two ways to use them.

With d = log_prob - ref_log_prob (per sampled token; samples come from the policy):

======================  ==========================================================
kind                    per-token value
======================  ==========================================================
``k1`` / ``kl``         d                                    (unbiased, high variance)
``abs``                 |d|
``k2`` / ``mse``        0.5 d^2
``k3`` / ``low_var_kl`` exp(-d) + d - 1  (= ratio - log ratio - 1, ratio = p_ref / p;
                        unbiased, always >= 0, low variance)
======================  ==========================================================

For ``k3`` the log-ratio is clamped to [-20, 20] before the exponential and the result
to [-10, 10], as is customary: a single token whose probability collapsed under the
policy would otherwise put exp(20+) into the loss and blow up the step.

Use the KL either as a reward penalty (``apply_kl_to_rewards``, classic RLHF PPO: the
penalty then enters the advantages) or as a loss term, GRPO-style:
``agg_loss(kl_penalty(log_prob, ref_log_prob, kind), response_mask, ...)`` aggregated
like the policy loss (same mode and minibatch denominator).
Vanilla StarPO used coefficient 0.001; StarPO-S uses 0 (no reference model).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ragen.algo.utils import as_float, check_same_shape
from ragen.errors import ConfigError

__all__ = ["KL_KINDS", "kl_penalty", "apply_kl_to_rewards"]

KL_KINDS = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl")


def kl_penalty(log_prob: Tensor, ref_log_prob: Tensor, kind: str = "low_var_kl") -> Tensor:
    """Per-token KL estimate (see module table): ``(B, T), (B, T) -> (B, T)`` float32.

    Not masked: multiply by the response mask (or aggregate it with ``agg_loss``). Differentiable
    w.r.t. ``log_prob``.
    """
    check_same_shape(log_prob=log_prob, ref_log_prob=ref_log_prob)
    diff = as_float(log_prob) - as_float(ref_log_prob)
    if kind in ("k1", "kl"):
        return diff
    if kind == "abs":
        return diff.abs()
    if kind in ("k2", "mse"):
        return 0.5 * diff.square()
    if kind in ("k3", "low_var_kl"):
        log_ratio = (-diff).clamp(-20.0, 20.0)  # log(p_ref / p)
        return (log_ratio.exp() - log_ratio - 1.0).clamp(-10.0, 10.0)
    raise ConfigError(f"unknown KL kind {kind!r}; choose one of {', '.join(KL_KINDS)}")


@torch.no_grad()
def apply_kl_to_rewards(
    token_level_rewards: Tensor, kl: Tensor, response_mask: Tensor, coef: float
) -> Tensor:
    """r'_t = r_t - coef * KL_t on response tokens (r unchanged elsewhere) -> ``(B, T)`` float32.

    ``kl`` is a per-token estimate from ``kl_penalty``; it is detached (rewards carry no
    gradient). The inputs are not modified.
    """
    check_same_shape(token_level_rewards=token_level_rewards, kl=kl, response_mask=response_mask)
    return as_float(token_level_rewards) - float(coef) * as_float(kl) * (response_mask != 0)
