"""The GAE family: token-level GAE, AICO's masked GAE, TRICO's bi-level GAE, Turn-PPO's turn GAE.

Tensors are ``(batch, seq)`` over the full multi-turn training sequence (prompt, sampled
responses and observation turns interleaved). ``response_mask`` is 1 on sampled
(trainable) tokens; ``turn_end_mask`` is 1 on the last sampled token of each turn.

Shared rules (see docs/ALGORITHMS.md):

* Recursions run over response tokens only. Observation/prompt tokens are *skipped*: the
  next value and the running advantage pass through them unchanged, and rewards placed
  on them are ignored (put rewards on response tokens, normally the turn's last token).
* The value after a sample's last step is ``bootstrap_value`` ``(B,)`` (V of the state
  after the last response token; None or 0: the episode terminated there). It enters
  the last TD error only: delta_last = r_last + gamma * bootstrap - V_last. Bootstrap
  where the sample is cut short but the episode's return goes on (a turn/length budget
  that is not part of the state, a windowed sample); leave it 0 where the env ended.
* Outputs are raw (not whitened; see ``masked_whiten``), detached, float32 (float64 for
  float64 input), and 0 at non-response positions. Returns = advantages + values.
* Vectorized: one pack (scatter) + blocked discounted scans + one unpack (gather); no
  Python loop over samples, turns or positions (see ``ragen.algo.scan``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ragen.algo.registry import register_advantage_estimator
from ragen.algo.scan import discounted_reverse_cumsum, pack_by_mask, shift_left, turn_grid
from ragen.algo.utils import as_bool_mask, check_fraction, check_same_shape, check_tensor

__all__ = [
    "compute_gae",
    "compute_masked_gae",
    "compute_bi_level_gae",
    "compute_vagen_bi_level_gae",
    "compute_turn_gae",
]


def _check_inputs(
    token_level_rewards: Tensor, values: Tensor, response_mask: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    check_tensor("token_level_rewards", token_level_rewards, ndim=2)
    check_tensor("values", values, ndim=2)
    check_tensor("response_mask", response_mask, ndim=2)
    check_same_shape(
        token_level_rewards=token_level_rewards, values=values, response_mask=response_mask
    )
    mask = as_bool_mask("response_mask", response_mask, token_level_rewards.shape)
    wide = torch.float64 in (values.dtype, token_level_rewards.dtype)
    dtype = torch.float64 if wide else torch.float32
    return token_level_rewards.to(dtype), values.to(dtype), mask


def _check_bootstrap(bootstrap_value: Tensor | None, rewards: Tensor) -> Tensor | None:
    """``bootstrap_value`` ``(B,)`` in the compute dtype, or None (terminated everywhere)."""
    if bootstrap_value is None:
        return None
    check_tensor("bootstrap_value", bootstrap_value, ndim=1)
    if bootstrap_value.shape[0] != rewards.shape[0]:
        raise ValueError(
            f"bootstrap_value has {bootstrap_value.shape[0]} entries but the batch has "
            f"{rewards.shape[0]} rows; pass one value per sample (0 where it terminated)"
        )
    return bootstrap_value.to(device=rewards.device, dtype=rewards.dtype)


def _add_to_last(x: Tensor, count: Tensor, value: Tensor) -> None:
    """In place: x[b, count_b - 1] += value_b for the rows with count_b > 0.

    Shapes: x ``(B, L)``, count ``(B,)`` (number of filled cells of each row, which fill
    columns 0..count_b - 1), value ``(B,)``.
    """
    last = (count - 1).clamp_min(0).unsqueeze(-1)
    value = torch.where(count > 0, value, torch.zeros_like(value))  # empty rows: nothing
    x.scatter_add_(-1, last, value.unsqueeze(-1))


def _gae_over_mask(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    gamma: float,
    lam: float,
    bootstrap: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """GAE over the positions of ``mask`` (others skipped); ``(B, T)`` -> (A, A + V) at mask, 0 elsewhere."""
    packing = pack_by_mask(mask)
    r, v = packing.pack(rewards), packing.pack(values)  # (B, W); 0 past each row's end
    # delta_j = r_j + gamma V_{j+1} - V_j; V = 0 in the empty cell after each row's last
    # token (the trash cell may be that cell, so the bootstrap never goes into v)...
    delta = r.sub_(v)
    delta[:, :-1].add_(v[:, 1:], alpha=gamma)
    if bootstrap is not None:  # ...and + gamma * V_boot at the row's last token instead
        _add_to_last(delta, packing.valid.sum(-1), gamma * bootstrap)
    adv = discounted_reverse_cumsum(delta, gamma * lam)
    return packing.unpack(adv), packing.unpack(adv.add_(v))


@register_advantage_estimator("gae")
@torch.no_grad()
def compute_gae(
    token_level_rewards: Tensor,
    values: Tensor,
    response_mask: Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    bootstrap_value: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation over response tokens (observation tokens skipped).

    For response positions t, with t' the next response position (past the last one,
    V_{t'} = ``bootstrap_value``, or 0 when None):
        delta_t = r_t + gamma * V_{t'} - V_t
        A_t     = delta_t + gamma * lam * A_{t'}
        R_t     = A_t + V_t
    Equivalently A_t = sum_{k >= 0} (gamma lam)^k delta_{t_k} over the following response
    tokens t_0 = t, t_1 = t', ...  With gamma = lam = 1 and V = 0, A_t is the reward-to-go.

    Args:
        token_level_rewards: ``(B, T)``; rewards on non-response tokens are ignored.
        values: ``(B, T)`` critic values V_t.
        response_mask: ``(B, T)``, 1 on sampled tokens.
        gamma, lam: in [0, 1] (paper default 1.0, 1.0).
        bootstrap_value: ``(B,)`` V of the state after each sample's last response token
            (0 or None: terminated).
    Returns:
        ``(advantages, returns)``, each ``(B, T)`` float32, 0 at non-response positions.
    """
    gamma = check_fraction("gamma", gamma)
    lam = check_fraction("lam", lam)
    rewards, values, mask = _check_inputs(token_level_rewards, values, response_mask)
    bootstrap = _check_bootstrap(bootstrap_value, rewards)
    return _gae_over_mask(rewards, values, mask, gamma, lam, bootstrap)


@register_advantage_estimator("masked_gae")
@torch.no_grad()
def compute_masked_gae(
    token_level_rewards: Tensor,
    values: Tensor,
    response_mask: Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    advantage_mask: Tensor | None = None,
    bootstrap_value: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """GAE with separate masks, as in VAGEN's AICO: M_adv for the recursion, M_loss for training.

    * ``advantage_mask`` (M_adv) picks the tokens the GAE recursion runs over -- their
      rewards and values form the TD chain, every other token is skipped exactly as in
      ``compute_gae``. Defaults to ``response_mask``.
    * ``response_mask`` (M_loss) picks the tokens that receive an advantage (the ones
      the policy loss trains on).

    advantages = GAE_{M_adv}(r, V) * M_loss; returns = (A + V) on M_adv (value targets).

    Difference to ``compute_gae``: there one mask plays both roles, so
    ``compute_masked_gae(..., advantage_mask=None) == compute_gae(...)``. Passing an
    all-ones ``advantage_mask`` reproduces "GAE without the GAE mask" (vanilla multi-turn
    PPO, where observation tokens sit in the TD chain and bootstrap through their own
    values) while the loss still covers only sampled tokens. Tokens in M_loss but not in
    M_adv get advantage 0 (they take no part in the credit assignment).

    Shapes: all ``(B, T)`` -> ``(advantages, returns)`` ``(B, T)`` float32.
    """
    gamma = check_fraction("gamma", gamma)
    lam = check_fraction("lam", lam)
    rewards, values, loss_mask = _check_inputs(token_level_rewards, values, response_mask)
    adv_mask = (
        loss_mask
        if advantage_mask is None
        else as_bool_mask("advantage_mask", advantage_mask, rewards.shape)
    )
    bootstrap = _check_bootstrap(bootstrap_value, rewards)
    advantages, returns = _gae_over_mask(rewards, values, adv_mask, gamma, lam, bootstrap)
    return advantages * loss_mask, returns


def _turn_level(
    token_level_rewards: Tensor,
    values: Tensor,
    response_mask: Tensor,
    turn_end_mask: Tensor,
    gamma_turn: float,
    lam_turn: float,
    bootstrap_value: Tensor | None,
    end_reward_only: bool = False,
):
    """Shared first stage of bi-level and turn GAE, in the per-turn grid ``(B, K + 1, Lt)``.

    Returns (grid, r, v (B, K + 1, Lt), A_turn (B, K + 1), V_turn (B, K + 1)); row K is
    empty and holds zeros (it supplies V_K = A_K = 0). The bootstrap value enters the TD
    error of each row's last turn. The turn reward R_k is the sum of the turn's token
    rewards, or with ``end_reward_only`` the reward on its turn-end token alone (VAGEN:
    the other tokens' rewards stay in the token-level recursion).
    """
    rewards, values, mask = _check_inputs(token_level_rewards, values, response_mask)
    ends = as_bool_mask("turn_end_mask", turn_end_mask, rewards.shape)
    if bool((ends & ~mask).any()):
        raise ValueError(
            "turn_end_mask marks a position outside response_mask; a turn end must be the "
            "last sampled token of its turn"
        )
    grid = turn_grid(mask, ends)
    r = grid.view(grid.packing.pack(rewards))  # (B, K + 1, Lt); row K is empty
    v = grid.view(grid.packing.pack(values))
    last = (grid.lengths - 1).clamp_min(0).unsqueeze(-1)
    if end_reward_only:
        turn_reward = r.gather(-1, last).squeeze(-1)  # R_k: the turn-end token's reward
    else:
        turn_reward = r.sum(-1)  # R_k: all rewards of turn k, attributed to its end
    turn_value = v.gather(-1, last).squeeze(-1)  # V_k at the turn end; 0 for absent turns
    delta = turn_reward + gamma_turn * shift_left(turn_value) - turn_value  # V_K = 0
    bootstrap = _check_bootstrap(bootstrap_value, rewards)
    if bootstrap is not None:  # V after a row's last turn (turns 0..n_b - 1 are non-empty)
        _add_to_last(delta, (grid.lengths > 0).sum(-1), gamma_turn * bootstrap)
    turn_adv = discounted_reverse_cumsum(delta, gamma_turn * lam_turn)  # A_k, (B, K + 1)
    return grid, r, v, turn_adv, turn_value


@register_advantage_estimator("bi_level_gae")
@torch.no_grad()
def compute_bi_level_gae(
    token_level_rewards: Tensor,
    values: Tensor,
    response_mask: Tensor,
    turn_end_mask: Tensor,
    gamma_turn: float = 0.95,
    lam_turn: float = 1.0,
    gamma_token: float = 1.0,
    lam_token: float = 1.0,
    bootstrap_value: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Bi-level GAE (TRICO, our variant): GAE across turns, then GAE inside each turn.

    Turn k = the response tokens after turn end k-1 up to turn end k. Its reward R_k is
    the sum of ALL its tokens' rewards (a reward inside a turn, such as a per-token KL
    penalty, is folded into the turn's), and it is represented by the value at its
    turn-end token, V_k (where VAGEN reads it too, and places turn rewards; V_k is the
    critic's value of the prefix before that token). ``compute_vagen_bi_level_gae`` keeps
    the in-turn rewards in the token-level recursion instead, as VAGEN does; both agree
    when rewards sit on turn ends only.

    Turn level, k = K-1..0 (V_K = ``bootstrap_value``, the value of the state after
    the last turn; 0 when None):
        delta_k = R_k + gamma_turn * V_{k+1} - V_k
        A_k     = delta_k + gamma_turn * lam_turn * A_{k+1}
    Token level, inside turn k: the turn-end token gets A_k; earlier tokens t get
        delta_t = gamma_token * V_{t+1} - V_t          (t+1 = next token of the same turn)
        A_t     = delta_t + gamma_token * lam_token * A_{t+1}
    Returns R_t = A_t + V_t.

    With a single turn this is ``compute_gae`` with the turn's reward on its last token.
    Response tokens after the last marked turn end form a final turn ending at the last
    response token. VAGEN defaults: gamma_turn 0.95, gamma_token 1.0, lam 1.0.

    Shapes: all ``(B, T)`` -> ``(advantages, returns)`` ``(B, T)`` float32, 0 off-response.
    """
    return _bi_level(
        token_level_rewards, values, response_mask, turn_end_mask, gamma_turn, lam_turn,
        gamma_token, lam_token, bootstrap_value, in_turn_rewards=False,
    )  # fmt: skip


@register_advantage_estimator("vagen_bi_level_gae")
@torch.no_grad()
def compute_vagen_bi_level_gae(
    token_level_rewards: Tensor,
    values: Tensor,
    response_mask: Tensor,
    turn_end_mask: Tensor,
    gamma_turn: float = 0.95,
    lam_turn: float = 1.0,
    gamma_token: float = 1.0,
    lam_token: float = 1.0,
    bootstrap_value: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Bi-level GAE exactly as VAGEN computes it (its ``bi_level_gae`` estimator).

    The one difference to ``compute_bi_level_gae`` is where rewards inside a turn go
    (with KL in the reward every token carries one):

    * turn level: R_k is the reward on turn k's END token only (its env reward plus that
      token's own KL penalty); V_k the value at the turn end;
            delta_k = R_k + gamma_turn * V_{k+1} - V_k
            A_k     = delta_k + gamma_turn * lam_turn * A_{k+1}
    * token level: the turn-end token gets A_k; each earlier token t of the turn keeps
      its own reward r_t in the recursion:
            delta_t = r_t + gamma_token * V_{t+1} - V_t
            A_t     = delta_t + gamma_token * lam_token * A_{t+1}

    VAGEN shares one lambda between the levels (``lam_turn = lam_token``) and whitens
    the advantages inside the estimator; here whitening is the trainer's
    ``algo.whiten_advantages`` (the ``vagen`` preset turns it on), which computes the same
    masked whitening over the response tokens. Returns R_t = A_t + V_t (before
    whitening, as in VAGEN). ``bootstrap_value`` enters the last turn's TD error as in
    ``compute_bi_level_gae`` (VAGEN has none: leave it None to match it everywhere).

    Shapes: all ``(B, T)`` -> ``(advantages, returns)`` ``(B, T)`` float32, 0 off-response.
    """
    return _bi_level(
        token_level_rewards, values, response_mask, turn_end_mask, gamma_turn, lam_turn,
        gamma_token, lam_token, bootstrap_value, in_turn_rewards=True,
    )  # fmt: skip


def _bi_level(
    token_level_rewards: Tensor,
    values: Tensor,
    response_mask: Tensor,
    turn_end_mask: Tensor,
    gamma_turn: float,
    lam_turn: float,
    gamma_token: float,
    lam_token: float,
    bootstrap_value: Tensor | None,
    in_turn_rewards: bool,
) -> tuple[Tensor, Tensor]:
    """The two bi-level estimators; ``in_turn_rewards``: VAGEN's placement of rewards
    inside a turn (token level) instead of ours (folded into the turn reward)."""
    gamma_turn = check_fraction("gamma_turn", gamma_turn)
    lam_turn = check_fraction("lam_turn", lam_turn)
    gamma_token = check_fraction("gamma_token", gamma_token)
    lam_token = check_fraction("lam_token", lam_token)
    grid, r, v, turn_adv, _ = _turn_level(
        token_level_rewards, values, response_mask, turn_end_mask, gamma_turn, lam_turn,
        bootstrap_value, end_reward_only=in_turn_rewards,
    )  # fmt: skip
    # Token level: seed A_k at the turn end. Each turn is its own row, so the scan cannot
    # leak across turns; cells past a turn's end hold V = 0 (and r = 0), hence delta = 0.
    delta = r.sub(v) if in_turn_rewards else v.neg()  # (r_t) - V_t
    delta[..., :-1].add_(v[..., 1:], alpha=gamma_token)  # + gamma_token V_{t+1}
    # The turn-end cell holds A_k. Absent turns write their A_k = 0 into cell 0.
    last = (grid.lengths - 1).clamp_min(0).unsqueeze(-1)
    delta.scatter_(-1, last, turn_adv.unsqueeze(-1))
    adv = discounted_reverse_cumsum(delta, gamma_token * lam_token)
    flat = adv.reshape(adv.shape[0], -1)
    return grid.packing.unpack(flat), grid.packing.unpack(flat.add_(v.view(flat.shape)))


@register_advantage_estimator("turn_gae")
@torch.no_grad()
def compute_turn_gae(
    token_level_rewards: Tensor,
    values: Tensor,
    response_mask: Tensor,
    turn_end_mask: Tensor,
    gamma_turn: float = 0.95,
    lam_turn: float = 1.0,
    bootstrap_value: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Turn-level GAE (Turn-PPO): the turn-level stage of ``compute_bi_level_gae`` only.

    A_k as in ``compute_bi_level_gae`` (turn rewards R_k, turn values V_k at turn-end
    tokens, ``bootstrap_value`` after the last turn); every token of turn k gets A_k, and returns G_k = A_k + V_k (the turn's
    value target) on every token of turn k, so a value loss over any of the turn's tokens
    regresses toward the return of the turn.

    Shapes: all ``(B, T)`` -> ``(advantages, returns)`` ``(B, T)`` float32, 0 off-response.
    """
    gamma_turn = check_fraction("gamma_turn", gamma_turn)
    lam_turn = check_fraction("lam_turn", lam_turn)
    grid, _, v, turn_adv, turn_value = _turn_level(
        token_level_rewards, values, response_mask, turn_end_mask, gamma_turn, lam_turn,
        bootstrap_value,
    )  # fmt: skip
    # Every token of turn k reads row k of the small (B, K + 1) tables.
    off_response = response_mask == 0
    adv = turn_adv.gather(1, grid.turn_id).masked_fill_(off_response, 0.0)
    ret = (turn_adv + turn_value).gather(1, grid.turn_id).masked_fill_(off_response, 0.0)
    return adv, ret
