"""Policy loss clipping, loss aggregation, value loss, explained variance, KL."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ragen.algo import (
    LOSS_AGG_MODES,
    agg_denominator,
    agg_loss,
    apply_kl_to_rewards,
    explained_variance,
    kl_penalty,
    ppo_policy_loss,
    value_loss,
)

# --------------------------------------------------------------------------- agg_loss

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
RAGGED = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # row 2 is empty


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 tokens
        ("seq-mean-token-sum", 3.5),  # (3 + 4) / 2 non-empty rows
        ("seq-mean-token-mean", 2.75),  # (1.5 + 4) / 2
        ("seq-mean-token-sum-norm", 7 / 12),  # 7 / (3 rows * N=4), N = norm_constant
    ],
)
def test_agg_loss_modes_on_ragged_mask(mode, expected):
    assert agg_loss(LOSS, RAGGED, mode, norm_constant=4).item() == pytest.approx(expected)
    # the same value as numerator / agg_denominator, however T is padded
    wide_loss, wide_mask = F.pad(LOSS, (0, 5), value=3.0), F.pad(RAGGED, (0, 5))
    assert agg_loss(wide_loss, wide_mask, mode, norm_constant=4).item() == pytest.approx(expected)
    denominator = {"token-mean": 3, "seq-mean-token-sum-norm": 12}.get(mode, 2)
    assert agg_denominator(wide_mask, mode, norm_constant=4) == denominator


def test_agg_loss_norm_constant_and_errors():
    assert agg_loss(
        LOSS, RAGGED, "seq-mean-token-sum-norm", norm_constant=7
    ).item() == pytest.approx(7 / 21)
    # Dr.GRPO's normalizer is the response budget, not the batch's width: no default
    for fn in (agg_loss, agg_denominator):
        args = (LOSS, RAGGED) if fn is agg_loss else (RAGGED,)
        with pytest.raises(ValueError, match="norm_constant="):
            fn(*args, "seq-mean-token-sum-norm")
        with pytest.raises(ValueError, match="norm_constant"):
            fn(*args, "seq-mean-token-sum-norm", norm_constant=0)
    with pytest.raises(ValueError, match="denominator"):
        agg_loss(LOSS, RAGGED, "token-mean", denominator=-1.0)
    with pytest.raises(ValueError, match="token-mean"):
        agg_loss(LOSS, RAGGED, "token-sum")
    assert set(LOSS_AGG_MODES) == {
        "token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-mean",
        "seq-mean-token-sum-norm",
    }
    for mode in LOSS_AGG_MODES:  # an all-empty mask gives 0, not NaN
        empty = torch.zeros_like(RAGGED)
        assert agg_loss(LOSS, empty, mode, norm_constant=3).item() == 0.0
        assert agg_loss(LOSS, empty, mode, denominator=agg_denominator(empty, mode, 3)) == 0.0


# ---------------------------------------------------------- micro-batching == one batch

# A minibatch as the trainer holds it: 7 rows right-padded to T = 12, ``LENGTHS`` real
# tokens each, response tokens only inside that length, row 3 without any response token.
LENGTHS = [12, 5, 9, 4, 11, 7, 3]
# Uneven micro-batches: the empty row shares one with a long row, one row alone, and
# each micro-batch is cut to its own longest row (widths 12, 11, 7, 3), as the trainer's
# token-budget micro-batching does.
MICROS = [[0, 3], [1, 2, 4], [5], [6]]
NORM = 16  # Dr.GRPO's response budget, larger than any row


def _minibatch():
    gen = torch.Generator().manual_seed(7)
    rows, T = len(LENGTHS), max(LENGTHS)
    inside = torch.arange(T) < torch.tensor(LENGTHS)[:, None]
    mask = inside & (torch.rand(rows, T, generator=gen) < 0.6)
    mask[:, 1] = True  # every row has tokens ...
    mask[3] = False  # ... but row 3
    mask &= inside
    data = {
        name: torch.randn(rows, T, generator=gen, dtype=torch.float64)
        for name in ("x", "old", "adv", "returns", "old_values")
    }
    data["adv"] *= 2.0
    data["log_prob"] = data["old"] + 0.3 * torch.randn(rows, T, generator=gen, dtype=torch.float64)
    data["vpreds"] = data["old_values"] + 0.8 * torch.randn(
        rows, T, generator=gen, dtype=torch.float64
    )
    return data, mask


def _losses(data, mask, mode, **agg):
    """The three losses of one (micro-)batch, each as a function of its own leaf."""
    x, log_prob, vpreds = data["x"], data["log_prob"], data["vpreds"]
    return {
        "agg_loss": agg_loss(x, mask, mode, **agg),
        "ppo_policy_loss": ppo_policy_loss(
            data["old"], log_prob, data["adv"], mask, 0.2, 0.28, loss_agg_mode=mode, **agg
        )[0],
        "value_loss": value_loss(
            vpreds, data["returns"], data["old_values"], mask, 0.2, loss_agg_mode=mode, **agg
        )[0],
    }


LEAF = {"agg_loss": "x", "ppo_policy_loss": "log_prob", "value_loss": "vpreds"}


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batch_losses_add_up_to_the_minibatch_loss(mode):
    """sum over micro-batches of loss(mb, denominator=D) == loss(minibatch), also in grad."""
    data, mask = _minibatch()
    assert len({max(LENGTHS[i] for i in mb) for mb in MICROS}) == len(MICROS)  # widths differ
    # one batch: each loss and its gradient w.r.t. its own leaf
    leaves = {k: data[k].clone().requires_grad_(True) for k in LEAF.values()}
    whole = _losses({**data, **leaves}, mask, mode, norm_constant=NORM)
    grads_whole = {
        name: torch.autograd.grad(loss, leaves[LEAF[name]])[0] for name, loss in whole.items()
    }
    # micro-batches: rows of MICROS, cut to each micro-batch's longest row
    denominator = agg_denominator(mask, mode, norm_constant=NORM)
    leaves = {k: data[k].clone().requires_grad_(True) for k in LEAF.values()}
    summed = dict.fromkeys(LEAF, 0.0)
    for mb in MICROS:
        idx, width = torch.tensor(mb), max(LENGTHS[i] for i in mb)
        sl = {k: v[idx, :width] for k, v in {**data, **leaves}.items()}
        for name, loss in _losses(sl, mask[idx, :width], mode, denominator=denominator).items():
            summed[name] = summed[name] + loss
    for name, loss in summed.items():
        grad = torch.autograd.grad(loss, leaves[LEAF[name]])[0]
        assert torch.allclose(loss, whole[name]), (name, float(loss), float(whole[name]))
        assert torch.allclose(grad, grads_whole[name]), name
        assert grads_whole[name].abs().sum() > 0


# --------------------------------------------------------------------------- PPO policy loss


def _policy(ratios, advantages, **kw):
    log_prob = torch.log(torch.tensor([ratios], dtype=torch.float32)).requires_grad_(True)
    adv = torch.tensor([advantages])
    loss, metrics = ppo_policy_loss(
        torch.zeros_like(log_prob), log_prob, adv, torch.ones_like(adv), **kw
    )
    loss.backward()
    return float(loss.detach()), metrics, log_prob.grad[0].tolist()


def test_ppo_policy_loss_hand_computed():
    # eps_low 0.2, eps_high 0.28:
    #  A=1,  r=1.5: max(-1.5, -1.28) = -1.28 (clipped)
    #  A=-1, r=0.5: max(0.5, 0.8)    = 0.8   (clipped)
    #  A=2,  r=1.1: max(-2.2, -2.2)  = -2.2  (not clipped)
    loss, metrics, grad = _policy([1.5, 0.5, 1.1], [1.0, -1.0, 2.0], clip_ratio_high=0.28)
    assert loss == pytest.approx((-1.28 + 0.8 - 2.2) / 3, rel=1e-6)
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 3)
    assert metrics["pg_clipfrac_lower"] == 0.0
    assert metrics["ppo_kl"] == pytest.approx(
        -(math.log(1.5) + math.log(0.5) + math.log(1.1)) / 3, rel=1e-5
    )
    # d/dlogp of -A r = -A r, over 3 tokens; clipped tokens get no gradient
    assert grad == pytest.approx([0.0, 0.0, -2.2 / 3], rel=1e-5)


D = 1e-3  # distance from a clip boundary


@pytest.mark.parametrize(
    "ratio,adv,clipped,has_grad",
    [
        # A > 0: the upper bound 1 + eps_high clips, the lower bound never does
        (1.28 - D, 1.0, False, True),
        (1.28 + D, 1.0, True, False),
        (0.8 - D, 1.0, False, True),
        (0.8 + D, 1.0, False, True),
        # A < 0: the lower bound 1 - eps_low clips, the upper bound never does (below c)
        (0.8 - D, -1.0, True, False),
        (0.8 + D, -1.0, False, True),
        (1.28 + D, -1.0, False, True),
        (1.28 - D, -1.0, False, True),
    ],
)
def test_ppo_clip_boundaries(ratio, adv, clipped, has_grad):
    loss, metrics, grad = _policy([ratio], [adv], clip_ratio_low=0.2, clip_ratio_high=0.28)
    assert metrics["pg_clipfrac"] == (1.0 if clipped else 0.0)
    assert metrics["pg_clipfrac_lower"] == 0.0
    bound = 1.28 if ratio > 1 else 0.8
    assert loss == pytest.approx(-adv * (bound if clipped else ratio), rel=1e-5)
    assert (abs(grad[0]) > 0) == has_grad
    if has_grad:
        assert grad[0] == pytest.approx(-adv * ratio, rel=1e-4)


@pytest.mark.parametrize("ratio,dual_active", [(3.0 - D, False), (3.0 + D, True), (10.0, True)])
def test_ppo_dual_clip(ratio, dual_active):
    # A = -2: the loss 2 r is capped at 2 c = 6 once r > c = 3
    loss, metrics, grad = _policy([ratio], [-2.0], clip_ratio_c=3.0)
    assert loss == pytest.approx(6.0 if dual_active else 2 * ratio, rel=1e-5)
    assert metrics["pg_clipfrac_lower"] == (1.0 if dual_active else 0.0)
    assert (grad[0] == 0.0) == dual_active


def test_ppo_policy_loss_masked_tokens_and_validation():
    log_prob = torch.tensor([[0.1, 5.0]], requires_grad=True)
    loss, _ = ppo_policy_loss(torch.zeros(1, 2), log_prob, torch.ones(1, 2), torch.tensor([[1, 0]]))
    loss.backward()
    assert loss.item() == pytest.approx(-math.exp(0.1), rel=1e-6)
    assert log_prob.grad[0, 1] == 0.0 and log_prob.grad[0, 0] != 0.0
    with pytest.raises(ValueError, match="clip_ratio_c"):
        ppo_policy_loss(
            torch.zeros(1, 2), log_prob, torch.ones(1, 2), torch.ones(1, 2), clip_ratio_c=1.0
        )
    # Huge log-ratios stay finite (clamped), bf16 inputs are computed in float32.
    lp = torch.tensor([[80.0, -80.0]], dtype=torch.bfloat16, requires_grad=True)
    loss, metrics = ppo_policy_loss(
        torch.zeros(1, 2), lp, torch.tensor([[-1.0, 1.0]]), torch.ones(1, 2)
    )
    loss.backward()
    assert loss.dtype == torch.float32 and math.isfinite(loss.item())
    assert torch.isfinite(lp.grad.float()).all()


def test_ppo_policy_loss_gradients_flow_for_every_agg_mode():
    gen = torch.Generator().manual_seed(0)
    old = torch.randn(4, 7, generator=gen) * 0.1
    log_prob = (old + torch.randn(4, 7, generator=gen) * 0.05).requires_grad_(True)
    adv = torch.randn(4, 7, generator=gen)
    mask = torch.rand(4, 7, generator=gen) < 0.7
    for mode in LOSS_AGG_MODES:
        log_prob.grad = None
        loss, _ = ppo_policy_loss(
            old, log_prob, adv, mask, 0.2, 0.28, loss_agg_mode=mode, norm_constant=7
        )
        loss.backward()
        assert torch.isfinite(log_prob.grad).all()
        assert (log_prob.grad[~mask] == 0).all() and (log_prob.grad[mask] != 0).any()


# --------------------------------------------------------------------------- value loss


def test_value_loss_hand_computed():
    # token 0: v=1, old=0.5, R=0: (1-0)^2 = 1 vs clip(1 -> 0.7): 0.49 -> 1   (not clipped)
    # token 1: v=2.5, old=2, R=3: 0.25 vs clip(2.5 -> 2.2): 0.64 -> 0.64   (clipped)
    v = torch.tensor([[1.0, 2.5]], requires_grad=True)
    loss, metrics = value_loss(
        v,
        torch.tensor([[0.0, 3.0]]),
        torch.tensor([[0.5, 2.0]]),
        torch.ones(1, 2),
        cliprange_value=0.2,
    )
    assert loss.item() == pytest.approx(0.5 * (1.0 + 0.64) / 2)
    assert metrics["vf_clipfrac"] == 0.5
    loss.backward()
    # d/dv 0.5 * (v - R)^2 / 2 = (v - R) / 2 for the unclipped token, 0 for the clipped one
    assert v.grad[0].tolist() == pytest.approx([0.5, 0.0])
    loss, metrics = value_loss(
        v, torch.tensor([[0.0, 3.0]]), torch.tensor([[0.5, 2.0]]), torch.ones(1, 2), None
    )
    assert loss.item() == pytest.approx(0.5 * (1.0 + 0.25) / 2) and metrics["vf_clipfrac"] == 0.0


def test_explained_variance():
    returns = torch.tensor([[1.0, 2.0, 3.0, 99.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    assert float(explained_variance(returns, returns, mask)) == pytest.approx(1.0)
    assert float(explained_variance(torch.full_like(returns, 2.0), returns, mask)) == pytest.approx(
        0.0
    )
    # residual [1, 0, -1] has variance 1, returns variance 1 -> 0; then a worse critic
    assert float(
        explained_variance(torch.tensor([[0.0, 2.0, 4.0, 0.0]]), returns, mask)
    ) == pytest.approx(0.0)
    assert math.isnan(float(explained_variance(returns, torch.ones(1, 4), mask)))


# --------------------------------------------------------------------------- KL


def test_kl_penalty_kinds_hand_computed():
    log_prob, ref = torch.tensor([[-1.0]]), torch.tensor([[-1.5]])  # d = 0.5
    assert float(kl_penalty(log_prob, ref, "k1")) == pytest.approx(0.5)
    assert float(kl_penalty(log_prob, ref, "kl")) == pytest.approx(0.5)
    assert float(kl_penalty(ref, log_prob, "abs")) == pytest.approx(0.5)
    assert float(kl_penalty(log_prob, ref, "mse")) == pytest.approx(0.125)
    assert float(kl_penalty(log_prob, ref, "k2")) == pytest.approx(0.125)
    assert float(kl_penalty(log_prob, ref, "k3")) == pytest.approx(
        math.exp(-0.5) + 0.5 - 1, rel=1e-6
    )
    assert float(kl_penalty(log_prob, ref, "low_var_kl")) == pytest.approx(0.10653066, rel=1e-6)
    # k3 is clamped: a collapsed token costs at most 10
    assert float(kl_penalty(torch.tensor([[-100.0]]), torch.tensor([[0.0]]), "k3")) == 10.0
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(log_prob, ref, "k4")


def test_apply_kl_to_rewards_and_kl_as_a_loss():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    kl = torch.tensor([[0.5, 0.2, 0.1]])
    out = apply_kl_to_rewards(rewards, kl, torch.tensor([[0, 1, 1]]), coef=0.1)
    torch.testing.assert_close(out, torch.tensor([[0.0, -0.02, 0.99]]))
    log_prob = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -2.0]])
    # as a loss term: aggregated like the policy loss (the trainer's composition)
    loss = agg_loss(kl_penalty(log_prob, ref, "k1"), torch.ones(1, 2))
    assert loss.item() == pytest.approx(0.25)
    loss.backward()
    assert log_prob.grad[0].tolist() == pytest.approx([0.5, 0.5])
    log_prob.grad = None
    agg_loss(kl_penalty(log_prob, ref, "low_var_kl"), torch.ones(1, 2)).backward()
    # d/dlogp of exp(-d) + d - 1 is 1 - exp(-d): 1 - e^-0.5 for token 0, 0 at d = 0
    assert log_prob.grad[0].tolist() == pytest.approx([(1 - math.exp(-0.5)) / 2, 0.0], rel=1e-5)
