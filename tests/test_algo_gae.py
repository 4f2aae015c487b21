"""GAE family: hand-computed examples, properties, and slow per-sample loop references.

The ``reference_*`` functions below are deliberately naive (a Python loop per sample and
per token, straight from the formulas in docs/ALGORITHMS.md); the vectorized code is
compared against them on random batches with random masks and turn structures.
bench/bench_advantages.py loads them from this file too.
"""

from __future__ import annotations

import pytest
import torch

from ragen.algo import (
    compute_bi_level_gae,
    compute_gae,
    compute_masked_gae,
    compute_turn_gae,
    get_advantage_estimator,
)

# --------------------------------------------------------------------------- references


def _boot(bootstrap, b):
    return 0.0 if bootstrap is None else float(bootstrap[b])


def reference_gae(rewards, values, mask, gamma, lam, bootstrap=None):
    """Per-sample loop: GAE over the positions where mask is set, others skipped; the
    value after the last position is ``bootstrap[b]`` (0 when None)."""
    batch, seq = rewards.shape
    adv = torch.zeros(batch, seq, dtype=torch.float64)
    ret = torch.zeros(batch, seq, dtype=torch.float64)
    for b in range(batch):
        positions = [t for t in range(seq) if mask[b, t]]
        next_value, next_adv = _boot(bootstrap, b), 0.0
        for t in reversed(positions):
            delta = float(rewards[b, t]) + gamma * next_value - float(values[b, t])
            a = delta + gamma * lam * next_adv
            adv[b, t], ret[b, t] = a, a + float(values[b, t])
            next_value, next_adv = float(values[b, t]), a
    return adv, ret


def reference_turns(mask_row, end_row):
    """Lists of response positions, one per turn (a trailing unterminated turn is closed)."""
    turns, current = [], []
    for t in range(len(mask_row)):
        if mask_row[t]:
            current.append(t)
            if end_row[t]:
                turns.append(current)
                current = []
    if current:
        turns.append(current)
    return turns


def reference_turn_advantages(rewards, values, turns, b, gamma_turn, lam_turn, bootstrap=None):
    """A_k for each turn of sample b, by the turn-level recursion."""
    turn_adv = [0.0] * len(turns)
    next_value, next_adv = _boot(bootstrap, b), 0.0
    for k in reversed(range(len(turns))):
        turn_reward = sum(float(rewards[b, t]) for t in turns[k])
        value = float(values[b, turns[k][-1]])
        delta = turn_reward + gamma_turn * next_value - value
        turn_adv[k] = delta + gamma_turn * lam_turn * next_adv
        next_value, next_adv = value, turn_adv[k]
    return turn_adv


def reference_bi_level_gae(
    rewards, values, mask, ends, gamma_turn, lam_turn, gamma_token, lam_token, bootstrap=None
):
    batch, seq = rewards.shape
    adv = torch.zeros(batch, seq, dtype=torch.float64)
    ret = torch.zeros(batch, seq, dtype=torch.float64)
    for b in range(batch):
        turns = reference_turns(mask[b], ends[b])
        turn_adv = reference_turn_advantages(
            rewards, values, turns, b, gamma_turn, lam_turn, bootstrap
        )
        for k, turn in enumerate(turns):
            end = turn[-1]
            adv[b, end] = turn_adv[k]
            next_value, next_adv = float(values[b, end]), turn_adv[k]
            for t in reversed(turn[:-1]):
                delta = gamma_token * next_value - float(values[b, t])
                adv[b, t] = delta + gamma_token * lam_token * next_adv
                next_value, next_adv = float(values[b, t]), float(adv[b, t])
            for t in turn:
                ret[b, t] = adv[b, t] + float(values[b, t])
    return adv, ret


def reference_turn_gae(rewards, values, mask, ends, gamma_turn, lam_turn, bootstrap=None):
    batch, seq = rewards.shape
    adv = torch.zeros(batch, seq, dtype=torch.float64)
    ret = torch.zeros(batch, seq, dtype=torch.float64)
    for b in range(batch):
        turns = reference_turns(mask[b], ends[b])
        turn_adv = reference_turn_advantages(
            rewards, values, turns, b, gamma_turn, lam_turn, bootstrap
        )
        for k, turn in enumerate(turns):
            for t in turn:
                adv[b, t] = turn_adv[k]
                ret[b, t] = turn_adv[k] + float(values[b, turn[-1]])
    return adv, ret


def reference_masked_gae(rewards, values, loss_mask, adv_mask, gamma, lam, bootstrap=None):
    adv, ret = reference_gae(rewards, values, adv_mask, gamma, lam, bootstrap)
    return adv * loss_mask.double(), ret


# --------------------------------------------------------------------------- random inputs


def random_multi_turn_batch(gen: torch.Generator, batch: int, max_turns: int = 5, max_len: int = 9):
    """Interleaved [observation][response] segments; turn ends at most segment ends, some
    dropped (implicit closing) and some extra ones inside segments; ragged right padding."""
    rows = []
    for _ in range(batch):
        mask_row, end_row = [], []
        for _ in range(int(torch.randint(0, max_turns + 1, (1,), generator=gen))):
            obs = int(torch.randint(0, max_len, (1,), generator=gen))
            resp = int(torch.randint(1, max_len, (1,), generator=gen))
            mask_row += [0] * obs + [1] * resp
            end_row += [0] * (obs + resp)
            if torch.rand(1, generator=gen) < 0.85:
                end_row[-1] = 1
            if resp > 2 and torch.rand(1, generator=gen) < 0.2:
                end_row[-2] = 1  # a turn end inside a segment
        rows.append((mask_row, end_row))
    seq = max(1, max(len(m) for m, _ in rows) + 2)
    mask = torch.zeros(batch, seq, dtype=torch.long)
    ends = torch.zeros(batch, seq, dtype=torch.long)
    for b, (m, e) in enumerate(rows):
        mask[b, : len(m)] = torch.tensor(m, dtype=torch.long)
        ends[b, : len(e)] = torch.tensor(e, dtype=torch.long)
    rewards = torch.randn(batch, seq, generator=gen, dtype=torch.float64)
    values = torch.randn(batch, seq, generator=gen, dtype=torch.float64)
    return rewards, values, mask, ends


DISCOUNTS = [(1.0, 1.0), (0.9, 0.95), (0.5, 0.0), (0.0, 0.7), (0.99, 0.3)]


# --------------------------------------------------------------------------- compute_gae


def test_gae_hand_computed_example():
    # gamma 0.9, lam 0.8 -> gamma*lam = 0.72
    # t=2: delta = 1 - 0.4 = 0.6                       A = 0.6
    # t=1: delta = 0.9*0.4 - 0.2 = 0.16                A = 0.16 + 0.72*0.6   = 0.592
    # t=0: delta = 0.9*0.2 - 0.5 = -0.32               A = -0.32 + 0.72*0.592 = 0.10624
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.2, 0.4]])
    adv, ret = compute_gae(rewards, values, torch.ones(1, 3), gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, torch.tensor([[0.10624, 0.592, 0.6]]))
    torch.testing.assert_close(ret, torch.tensor([[0.60624, 0.792, 1.0]]))
    assert adv.dtype == torch.float32 and not adv.requires_grad


def test_gae_skips_observation_token_in_hand_example():
    # Same example with an observation token (reward 5, value 9) inserted at position 1:
    # it is skipped, so the response tokens get exactly the numbers above.
    rewards = torch.tensor([[0.0, 5.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 9.0, 0.2, 0.4]])
    mask = torch.tensor([[1, 0, 1, 1]])
    adv, ret = compute_gae(rewards, values, mask, gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, torch.tensor([[0.10624, 0.0, 0.592, 0.6]]))
    torch.testing.assert_close(ret, torch.tensor([[0.60624, 0.0, 0.792, 1.0]]))


def test_gae_with_unit_discounts_and_zero_values_is_reward_to_go():
    gen = torch.Generator().manual_seed(0)
    rewards, _, mask, _ = random_multi_turn_batch(gen, batch=16)
    adv, ret = compute_gae(rewards, torch.zeros_like(rewards), mask, gamma=1.0, lam=1.0)
    masked = rewards * mask
    reward_to_go = masked.flip(-1).cumsum(-1).flip(-1) * mask
    torch.testing.assert_close(adv, reward_to_go)
    torch.testing.assert_close(ret, reward_to_go)


@pytest.mark.parametrize("gamma,lam", DISCOUNTS)
def test_gae_inserting_observation_tokens_changes_nothing(gamma, lam):
    gen = torch.Generator().manual_seed(1)
    batch, seq = 6, 40
    rewards = torch.randn(batch, seq, generator=gen, dtype=torch.float64)
    values = torch.randn(batch, seq, generator=gen, dtype=torch.float64)
    base_adv, base_ret = compute_gae(rewards, values, torch.ones(batch, seq), gamma, lam)
    # Insert 25 observation tokens (random rewards/values) at random places.
    total = seq + 25
    is_obs = torch.zeros(batch, total, dtype=torch.bool)
    for b in range(batch):
        is_obs[b, torch.randperm(total, generator=gen)[:25]] = True
    r2 = torch.randn(batch, total, generator=gen, dtype=torch.float64) * 100
    v2 = torch.randn(batch, total, generator=gen, dtype=torch.float64) * 100
    r2[~is_obs], v2[~is_obs] = rewards.flatten(), values.flatten()
    adv, ret = compute_gae(r2, v2, ~is_obs, gamma, lam)
    torch.testing.assert_close(adv[~is_obs].view(batch, seq), base_adv)
    torch.testing.assert_close(ret[~is_obs].view(batch, seq), base_ret)
    assert (adv[is_obs] == 0).all() and (ret[is_obs] == 0).all()


@pytest.mark.parametrize("gamma,lam", DISCOUNTS)
def test_gae_matches_loop_reference(gamma, lam):
    gen = torch.Generator().manual_seed(2)
    rewards, values, mask, _ = random_multi_turn_batch(gen, batch=24)
    adv, ret = compute_gae(rewards, values, mask, gamma, lam)
    ref_adv, ref_ret = reference_gae(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)
    boot = torch.randn(24, generator=gen, dtype=torch.float64)
    adv, ret = compute_gae(rewards, values, mask, gamma, lam, bootstrap_value=boot)
    ref_adv, ref_ret = reference_gae(rewards, values, mask, gamma, lam, boot)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


def test_gae_long_sequence_crosses_scan_blocks():
    # 300 response tokens spread over 700 positions: several 64-wide scan blocks.
    gen = torch.Generator().manual_seed(3)
    rewards = torch.randn(3, 700, generator=gen, dtype=torch.float64)
    values = torch.randn(3, 700, generator=gen, dtype=torch.float64)
    mask = torch.rand(3, 700, generator=gen) < 0.43
    for gamma, lam in [(0.97, 0.9), (1.0, 0.5)]:
        adv, ret = compute_gae(rewards, values, mask, gamma, lam)
        ref_adv, ref_ret = reference_gae(rewards, values, mask, gamma, lam)
        torch.testing.assert_close(adv, ref_adv)
        torch.testing.assert_close(ret, ref_ret)


def test_gae_bfloat16_inputs_compute_in_float32():
    gen = torch.Generator().manual_seed(4)
    rewards = torch.randn(4, 50, generator=gen).bfloat16()
    values = torch.randn(4, 50, generator=gen).bfloat16()
    mask = torch.rand(4, 50, generator=gen) < 0.6
    adv, ret = compute_gae(rewards, values, mask, 0.99, 0.95)
    assert adv.dtype == ret.dtype == torch.float32
    ref_adv, ref_ret = compute_gae(rewards.float(), values.float(), mask, 0.99, 0.95)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


def test_gae_empty_and_edge_rows():
    rewards = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    values = torch.zeros(2, 2)
    adv, ret = compute_gae(rewards, values, torch.zeros(2, 2), 1.0, 1.0)
    assert (adv == 0).all() and (ret == 0).all()
    adv, _ = compute_gae(rewards, values, torch.tensor([[0, 0], [0, 1]]), 1.0, 1.0)
    torch.testing.assert_close(adv, torch.tensor([[0.0, 0.0], [0.0, 4.0]]))


def test_gae_rejects_bad_input():
    r = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="gamma"):
        compute_gae(r, r, r, gamma=1.5, lam=1.0)
    with pytest.raises(ValueError, match="shape mismatch"):
        compute_gae(r, torch.zeros(2, 4), r, 1.0, 1.0)
    with pytest.raises(ValueError, match="2 dims"):
        compute_gae(torch.zeros(3), torch.zeros(3), torch.zeros(3), 1.0, 1.0)
    with pytest.raises(TypeError, match="torch.Tensor"):
        compute_gae([[0.0]], r, r, 1.0, 1.0)


# --------------------------------------------------------------------------- masked GAE


def test_masked_gae_hand_computed_example():
    # rewards only at the end; gamma 0.5, lam 1 -> A = G - V with G the discounted return.
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5]])
    loss_mask = torch.tensor([[0, 1, 1, 0, 1]])
    # M_adv = all tokens: G = [1/16, 1/8, 1/4, 1/2, 1]; A = G - V, kept on M_loss.
    adv, ret = compute_masked_gae(
        rewards, values, loss_mask, gamma=0.5, lam=1.0, advantage_mask=torch.ones(1, 5)
    )
    torch.testing.assert_close(adv, torch.tensor([[0.0, -0.075, -0.05, 0.0, 0.5]]))
    torch.testing.assert_close(ret, torch.tensor([[0.0625, 0.125, 0.25, 0.5, 1.0]]))
    # M_adv = M_loss (default): chain over positions 1, 2, 4: G = [1/4, 1/2, 1].
    adv, ret = compute_masked_gae(rewards, values, loss_mask, gamma=0.5, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[0.0, 0.05, 0.2, 0.0, 0.5]]))
    torch.testing.assert_close(ret, torch.tensor([[0.0, 0.25, 0.5, 0.0, 1.0]]))


@pytest.mark.parametrize("gamma,lam", DISCOUNTS)
def test_masked_gae_matches_loop_reference(gamma, lam):
    gen = torch.Generator().manual_seed(5)
    rewards, values, loss_mask, _ = random_multi_turn_batch(gen, batch=16)
    adv_mask = (torch.rand(rewards.shape, generator=gen) < 0.5) | (loss_mask != 0)
    boot = torch.randn(16, generator=gen, dtype=torch.float64)
    for bootstrap in (None, boot):
        adv, ret = compute_masked_gae(
            rewards, values, loss_mask, gamma, lam, adv_mask, bootstrap_value=bootstrap
        )
        ref_adv, ref_ret = reference_masked_gae(
            rewards, values, loss_mask, adv_mask, gamma, lam, bootstrap
        )
        torch.testing.assert_close(adv, ref_adv)
        torch.testing.assert_close(ret, ref_ret)
    # Without an advantage mask it is exactly compute_gae.
    same = compute_masked_gae(rewards, values, loss_mask, gamma, lam)
    for a, b in zip(same, compute_gae(rewards, values, loss_mask, gamma, lam)):
        torch.testing.assert_close(a, b)


# --------------------------------------------------------------------------- bi-level / turn GAE


BI_LEVEL_EXAMPLE = dict(
    # positions:        0    1    2    3    4    5
    rewards=torch.tensor([[0.0, 0.0, 1.0, 7.0, 0.5, 2.0]]),  # 7.0 on an observation: ignored
    values=torch.tensor([[9.0, 0.1, 0.2, 9.0, 0.3, 0.4]]),
    mask=torch.tensor([[0, 1, 1, 0, 1, 1]]),
    ends=torch.tensor([[0, 0, 1, 0, 0, 1]]),
)


def test_bi_level_gae_hand_computed_example():
    # Turns: {1, 2} (end 2) and {4, 5} (end 5). R_0 = 1, R_1 = 0.5 + 2 = 2.5.
    # V_0 = V[2] = 0.2, V_1 = V[5] = 0.4.  gamma_turn 0.9, lam_turn 0.5 -> 0.45.
    #   A_1 = 2.5 - 0.4 = 2.1
    #   A_0 = 1 + 0.9*0.4 - 0.2 + 0.45*2.1 = 1.16 + 0.945 = 2.105
    # Token level, gamma_token 0.8, lam_token 0.5 -> 0.4:
    #   pos 4: 0.8*0.4 - 0.3 + 0.4*2.1   = 0.02 + 0.84  = 0.86
    #   pos 1: 0.8*0.2 - 0.1 + 0.4*2.105 = 0.06 + 0.842 = 0.902
    ex = BI_LEVEL_EXAMPLE
    adv, ret = compute_bi_level_gae(
        ex["rewards"], ex["values"], ex["mask"], ex["ends"],
        gamma_turn=0.9, lam_turn=0.5, gamma_token=0.8, lam_token=0.5,
    )  # fmt: skip
    torch.testing.assert_close(adv, torch.tensor([[0.0, 0.902, 2.105, 0.0, 0.86, 2.1]]))
    torch.testing.assert_close(ret, torch.tensor([[0.0, 1.002, 2.305, 0.0, 1.16, 2.5]]))


def test_turn_gae_hand_computed_example():
    # Same turns as above: every token of turn k gets A_k, returns A_k + V_k.
    ex = BI_LEVEL_EXAMPLE
    adv, ret = compute_turn_gae(
        ex["rewards"], ex["values"], ex["mask"], ex["ends"], gamma_turn=0.9, lam_turn=0.5
    )
    torch.testing.assert_close(adv, torch.tensor([[0.0, 2.105, 2.105, 0.0, 2.1, 2.1]]))
    torch.testing.assert_close(ret, torch.tensor([[0.0, 2.305, 2.305, 0.0, 2.5, 2.5]]))


@pytest.mark.parametrize("gamma,lam", DISCOUNTS)
def test_bi_level_gae_with_one_turn_equals_gae(gamma, lam):
    gen = torch.Generator().manual_seed(6)
    batch, seq = 8, 30
    mask = torch.rand(batch, seq, generator=gen) < 0.7
    values = torch.randn(batch, seq, generator=gen, dtype=torch.float64)
    rewards = torch.randn(batch, seq, generator=gen, dtype=torch.float64) * mask
    last = (mask.long().cumsum(-1) == mask.sum(-1, keepdim=True)) & mask
    # GAE with the whole reward moved onto the last response token.
    at_end = torch.where(last, rewards.sum(-1, keepdim=True), 0.0)
    expected = compute_gae(at_end, values, mask, gamma, lam)
    for ends in (last, torch.zeros_like(mask)):  # explicit end, or implicit closing
        got = compute_bi_level_gae(
            rewards,
            values,
            mask,
            ends,
            gamma_turn=0.3,
            lam_turn=0.2,
            gamma_token=gamma,
            lam_token=lam,
        )
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("seed", range(4))
def test_bi_level_and_turn_gae_match_loop_reference(seed):
    gen = torch.Generator().manual_seed(100 + seed)
    rewards, values, mask, ends = random_multi_turn_batch(gen, batch=20)
    gamma_turn, lam_turn = DISCOUNTS[seed]
    gamma_token, lam_token = DISCOUNTS[(seed + 2) % len(DISCOUNTS)]
    hyper = (gamma_turn, lam_turn, gamma_token, lam_token)
    boot = torch.randn(20, generator=gen, dtype=torch.float64)
    for bootstrap in (None, boot):
        adv, ret = compute_bi_level_gae(rewards, values, mask, ends, *hyper, bootstrap)
        ref_adv, ref_ret = reference_bi_level_gae(rewards, values, mask, ends, *hyper, bootstrap)
        torch.testing.assert_close(adv, ref_adv)
        torch.testing.assert_close(ret, ref_ret)
        adv, ret = compute_turn_gae(rewards, values, mask, ends, gamma_turn, lam_turn, bootstrap)
        ref_adv, ref_ret = reference_turn_gae(
            rewards, values, mask, ends, gamma_turn, lam_turn, bootstrap
        )
        torch.testing.assert_close(adv, ref_adv)
        torch.testing.assert_close(ret, ref_ret)


def test_bi_level_gae_long_turns_cross_scan_blocks():
    gen = torch.Generator().manual_seed(7)
    rewards, values, mask, ends = random_multi_turn_batch(gen, batch=4, max_turns=4, max_len=150)
    adv, ret = compute_bi_level_gae(rewards, values, mask, ends, 0.95, 0.9, 0.97, 0.8)
    ref_adv, ref_ret = reference_bi_level_gae(rewards, values, mask, ends, 0.95, 0.9, 0.97, 0.8)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


def test_bi_level_gae_rejects_turn_end_outside_response():
    mask = torch.tensor([[1, 1, 0]])
    with pytest.raises(ValueError, match="turn_end_mask"):
        compute_bi_level_gae(torch.zeros(1, 3), torch.zeros(1, 3), mask, torch.tensor([[0, 0, 1]]))
    with pytest.raises(ValueError, match="gamma_turn"):
        compute_turn_gae(torch.zeros(1, 3), torch.zeros(1, 3), mask, mask, gamma_turn=-0.1)


# --------------------------------------------------------------------------- bootstrapping

# Row 0: two turns {1, 2} and {5, 6} with an observation gap {3, 4}; row 1: one turn
# {2, 3, 4}; row 2: no response token. Values on skipped tokens are decoys (9.0), the
# prompt reward 5.0 is ignored.
BOOT = dict(
    rewards=torch.tensor(
        [[5.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0, 0.0],
         [0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0],
         [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]], dtype=torch.float64),
    values=torch.tensor(
        [[9.0, 0.5, 0.4, 0.6, 9.0, 0.3, 0.2, 9.0],
         [9.0, 9.0, 0.6, 0.1, 0.8, 9.0, 9.0, 9.0],
         [9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0]], dtype=torch.float64),
    mask=torch.tensor(
        [[0, 1, 1, 0, 0, 1, 1, 0],
         [0, 0, 1, 1, 1, 0, 0, 0],
         [0, 0, 0, 0, 0, 0, 0, 0]]),
    ends=torch.tensor(
        [[0, 0, 1, 0, 0, 0, 1, 0],
         [0, 0, 0, 0, 1, 0, 0, 0],
         [0, 0, 0, 0, 0, 0, 0, 0]]),
)  # fmt: skip
# terminated: the value after the last token is 0; truncated: the critic's V(s_next)
ENDS_OF_EPISODE = {"terminated": (0.0, 0.0, 0.0), "truncated": (0.7, -0.4, 5.0)}


def _table(row0: dict, row1: dict) -> torch.Tensor:
    out = torch.zeros(3, 8, dtype=torch.float64)
    for b, row in enumerate((row0, row1)):
        for t, x in row.items():
            out[b, t] = x
    return out


@pytest.mark.parametrize("end", ENDS_OF_EPISODE)
def test_gae_bootstraps_the_last_token_hand_computed(end):
    b0, b1, b2 = ENDS_OF_EPISODE[end]
    # gamma 0.9, lam 0.8 -> 0.72. Row 0 chain 1, 2, 5, 6 (3 and 4 skipped):
    a6 = 2 + 0.9 * b0 - 0.2
    a5 = (0.9 * 0.2 - 0.3) + 0.72 * a6
    a2 = (1 + 0.9 * 0.3 - 0.4) + 0.72 * a5  # V after token 2 is V[5]: the gap is skipped
    a1 = (0.9 * 0.4 - 0.5) + 0.72 * a2
    # Row 1 chain 2, 3, 4:
    c4 = -1 + 0.9 * b1 - 0.8
    c3 = (0.9 * 0.8 - 0.1) + 0.72 * c4
    c2 = (0.9 * 0.1 - 0.6) + 0.72 * c3
    adv = _table({1: a1, 2: a2, 5: a5, 6: a6}, {2: c2, 3: c3, 4: c4})
    boot = torch.tensor([b0, b1, b2], dtype=torch.float64)
    got_adv, got_ret = compute_gae(
        BOOT["rewards"], BOOT["values"], BOOT["mask"], 0.9, 0.8, bootstrap_value=boot
    )
    torch.testing.assert_close(got_adv, adv)
    torch.testing.assert_close(got_ret, (adv + BOOT["values"]) * BOOT["mask"])


@pytest.mark.parametrize("end", ENDS_OF_EPISODE)
def test_masked_gae_bootstraps_the_last_advantage_token_hand_computed(end):
    b0, b1, b2 = ENDS_OF_EPISODE[end]
    adv_mask = BOOT["mask"].clone()
    adv_mask[0, 3] = 1  # a turn-close token after turn 0 joins the recursion
    # Row 0 chain 1, 2, 3, 5, 6: token 3 (r = 0, V = 0.6) sits between the turns.
    a6 = 2 + 0.9 * b0 - 0.2
    a5 = (0.9 * 0.2 - 0.3) + 0.72 * a6
    a3 = (0.9 * 0.3 - 0.6) + 0.72 * a5
    a2 = (1 + 0.9 * 0.6 - 0.4) + 0.72 * a3
    a1 = (0.9 * 0.4 - 0.5) + 0.72 * a2
    c4 = -1 + 0.9 * b1 - 0.8
    c3 = (0.9 * 0.8 - 0.1) + 0.72 * c4
    c2 = (0.9 * 0.1 - 0.6) + 0.72 * c3
    adv = _table({1: a1, 2: a2, 3: a3, 5: a5, 6: a6}, {2: c2, 3: c3, 4: c4})
    boot = torch.tensor([b0, b1, b2], dtype=torch.float64)
    got_adv, got_ret = compute_masked_gae(
        BOOT["rewards"], BOOT["values"], BOOT["mask"], 0.9, 0.8, adv_mask, boot
    )
    torch.testing.assert_close(got_adv, adv * BOOT["mask"])  # token 3 is not trained
    torch.testing.assert_close(got_ret, (adv + BOOT["values"]) * adv_mask)


@pytest.mark.parametrize("end", ENDS_OF_EPISODE)
def test_turn_estimators_bootstrap_after_the_last_turn_hand_computed(end):
    b0, b1, b2 = ENDS_OF_EPISODE[end]
    # Turn level, gamma_turn 0.9, lam_turn 0.8 -> 0.72. Row 0: R = (1, 2), V = (0.4, 0.2).
    t1 = 2 + 0.9 * b0 - 0.2
    t0 = (1 + 0.9 * 0.2 - 0.4) + 0.72 * t1
    u0 = -1 + 0.9 * b1 - 0.8  # row 1: one turn, R = -1, V = 0.8
    boot = torch.tensor([b0, b1, b2], dtype=torch.float64)
    data = (BOOT["rewards"], BOOT["values"], BOOT["mask"], BOOT["ends"])

    adv, ret = compute_turn_gae(*data, 0.9, 0.8, bootstrap_value=boot)
    torch.testing.assert_close(adv, _table({1: t0, 2: t0, 5: t1, 6: t1}, {2: u0, 3: u0, 4: u0}))
    expected_ret = _table(
        {1: t0 + 0.4, 2: t0 + 0.4, 5: t1 + 0.2, 6: t1 + 0.2},
        {2: u0 + 0.8, 3: u0 + 0.8, 4: u0 + 0.8},
    )
    torch.testing.assert_close(ret, expected_ret)

    # Token level inside each turn, gamma_token 0.95, lam_token 0.5 -> 0.475.
    adv, ret = compute_bi_level_gae(*data, 0.9, 0.8, 0.95, 0.5, bootstrap_value=boot)
    a1 = (0.95 * 0.4 - 0.5) + 0.475 * t0
    a5 = (0.95 * 0.2 - 0.3) + 0.475 * t1
    c3 = (0.95 * 0.8 - 0.1) + 0.475 * u0
    c2 = (0.95 * 0.1 - 0.6) + 0.475 * c3
    expected = _table({1: a1, 2: t0, 5: a5, 6: t1}, {2: c2, 3: c3, 4: u0})
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, (expected + BOOT["values"]) * BOOT["mask"])


@pytest.mark.parametrize("name", ["gae", "masked_gae", "bi_level_gae", "turn_gae"])
def test_bootstrap_none_is_zeros_exactly(name):
    gen = torch.Generator().manual_seed(9)
    rewards, values, mask, ends = random_multi_turn_batch(gen, batch=12)
    est = get_advantage_estimator(name)
    data = dict(token_level_rewards=rewards, response_mask=mask, values=values,
                turn_end_mask=ends, gamma=0.9, lam=0.8, gamma_turn=0.7, lam_turn=0.6)  # fmt: skip
    assert "bootstrap_value" in est.data_params
    none = est(**data)
    zeros = est(**data, bootstrap_value=torch.zeros(12, dtype=torch.float64))
    for a, b in zip(none, zeros):
        assert torch.equal(a, b)
    # a nonzero bootstrap changes exactly the rows with response tokens
    boot = torch.ones(12, dtype=torch.float64)
    changed = (est(**data, bootstrap_value=boot)[0] != none[0]).any(-1)
    assert torch.equal(changed, mask.any(-1))


def test_bootstrap_value_shape_is_checked():
    r = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="one value per sample"):
        compute_gae(r, r, r, bootstrap_value=torch.zeros(3))
    with pytest.raises(ValueError, match="1 dims"):
        compute_turn_gae(r, r, r, r, bootstrap_value=torch.zeros(2, 1))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gae_family_on_cuda_matches_cpu():
    gen = torch.Generator().manual_seed(8)
    rewards, values, mask, ends = random_multi_turn_batch(gen, batch=16)
    boot = torch.randn(16, generator=gen, dtype=torch.float64)
    cpu = compute_bi_level_gae(rewards, values, mask, ends, 0.95, 1.0, 1.0, 1.0, boot)
    gpu = compute_bi_level_gae(
        rewards.cuda(), values.cuda(), mask.cuda(), ends.cuda(), 0.95, 1.0, 1.0, 1.0, boot.cuda()
    )
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(a, b.cpu())
    cpu = compute_gae(rewards, values, mask, 0.9, 0.8, boot)
    gpu = compute_gae(rewards.cuda(), values.cuda(), mask.cuda(), 0.9, 0.8, boot.cuda())
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(a, b.cpu())
    cpu = compute_gae(rewards.bfloat16(), values.bfloat16(), mask, 0.99, 0.95)
    gpu = compute_gae(rewards.bfloat16().cuda(), values.bfloat16().cuda(), mask.cuda(), 0.99, 0.95)
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(a, b.cpu())
