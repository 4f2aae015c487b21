"""The `vagen` preset against VAGEN's published bi-level GAE, so "VAGEN's defaults" is checked.

``vagen_reference`` below is a per-token loop written from VAGEN's published recursion
(vagen-legacy ``compute_bi_level_gae_advantage_return`` with a reward mask at the end of
each LLM turn, then ``masked_whiten`` over the loss mask), kept as naive as that
description: the turn level reads the reward on each turn-end token and the value there;
the token level walks the loss-mask positions backwards, restarting at each turn end from
the turn's advantage, with every other token's own reward (its KL penalty) in its TD
error. Rewards inside turns are where our ``bi_level_gae`` (which folds them into the
turn reward) and VAGEN's differ; the test feeds exactly those.
"""

from __future__ import annotations

import pytest
import torch

from ragen.algo import (
    compute_bi_level_gae,
    compute_vagen_bi_level_gae,
    get_advantage_estimator,
    masked_whiten,
)


def vagen_reference(rewards, values, loss_mask, turn_end, gamma, lam, high_level_gamma):
    """VAGEN's estimator: ``(whitened advantages, returns)``, float64, one loop per row."""
    batch, seq = rewards.shape
    adv = torch.zeros(batch, seq, dtype=torch.float64)
    ret = torch.zeros(batch, seq, dtype=torch.float64)
    updated = rewards.clone().double()
    for b in range(batch):
        ends = [t for t in range(seq) if turn_end[b, t]]
        # turn level: backwards over the turn ends, V of the next turn's end
        running = 0.0
        for i in reversed(range(len(ends))):
            t = ends[i]
            next_value = float(values[b, ends[i + 1]]) if i + 1 < len(ends) else 0.0
            delta = float(rewards[b, t]) + high_level_gamma * next_value - float(values[b, t])
            running = delta + high_level_gamma * lam * running
            adv[b, t] = running
        for t in ends:
            ret[b, t] = adv[b, t] + values[b, t]
            updated[b, t] = adv[b, t] + values[b, t]  # the turn's return, as its reward
        # token level: backwards over the loss mask, restarting at every turn end
        positions = [t for t in range(seq) if loss_mask[b, t]]
        running = 0.0
        for j in reversed(range(len(positions))):
            t = positions[j]
            if t in ends:
                next_value, running = 0.0, 0.0
            else:
                next_value = float(values[b, positions[j + 1]])
            delta = float(updated[b, t]) + gamma * next_value - float(values[b, t])
            running = delta + gamma * lam * running
            adv[b, t] = running
            ret[b, t] = running + float(values[b, t])
    # verl's masked_whiten: (x - mean) / sqrt(unbiased var + 1e-8) over the loss mask
    m = loss_mask.double()
    mean = (adv * m).sum() / m.sum()
    var = (((adv - mean) ** 2) * m).sum() / m.sum() * m.sum() / (m.sum() - 1)
    return (adv - mean) * torch.rsqrt(var + 1e-8) * m, ret


def _episodes(seed: int, batch: int = 5, seq: int = 40):
    """Random multi-turn rows: prompt, then turns of sampled tokens, each closed by a
    turn end, with observation tokens between; KL-like rewards on every sampled token
    and env rewards on the turn ends."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(batch, seq, dtype=torch.long)
    ends = torch.zeros(batch, seq, dtype=torch.long)
    for b in range(batch):
        t = int(torch.randint(1, 5, (1,), generator=g))
        while True:
            length = int(torch.randint(1, 7, (1,), generator=g))
            if t + length > seq:
                break
            mask[b, t : t + length] = 1
            ends[b, t + length - 1] = 1
            t += length + int(torch.randint(1, 4, (1,), generator=g))  # observation tokens
    kl = 0.001 * torch.randn(batch, seq, generator=g, dtype=torch.float64).abs()
    rewards = -kl * mask  # the KL penalty in the reward, on every sampled token
    rewards += ends * torch.randn(batch, seq, generator=g, dtype=torch.float64)
    values = torch.randn(batch, seq, generator=g, dtype=torch.float64) * mask
    return rewards, values, mask, ends


@pytest.mark.parametrize("seed", range(6))
def test_vagen_bi_level_gae_is_vagens_recursion_with_rewards_inside_turns(seed):
    rewards, values, mask, ends = _episodes(seed)
    ref_adv, ref_ret = vagen_reference(rewards, values, mask, ends, 1.0, 1.0, 0.95)
    adv, ret = compute_vagen_bi_level_gae(
        rewards, values, mask, ends, gamma_turn=0.95, lam_turn=1.0, gamma_token=1.0,
        lam_token=1.0,
    )  # fmt: skip
    torch.testing.assert_close(ret * mask, ref_ret * mask, rtol=1e-9, atol=1e-9)
    # the trainer whitens after the estimator (algo.whiten_advantages, on in `vagen`)
    torch.testing.assert_close(masked_whiten(adv, mask), ref_adv, rtol=1e-7, atol=1e-7)


def test_with_a_kl_penalty_in_the_reward_trico_and_vagen_differ():
    """The probe found our bi_level_gae up to 0.84 away from VAGEN's once KL sits in the
    reward; rewards on turn ends only, the two are the same estimator."""
    rewards, values, mask, ends = _episodes(0, batch=8, seq=60)
    args = dict(gamma_turn=0.95, lam_turn=1.0, gamma_token=1.0, lam_token=1.0)
    ours, _ = compute_bi_level_gae(rewards, values, mask, ends, **args)
    theirs, _ = compute_vagen_bi_level_gae(rewards, values, mask, ends, **args)
    assert (ours - theirs).abs().max() > 1e-3
    at_ends = rewards * ends
    ours, ours_ret = compute_bi_level_gae(at_ends, values, mask, ends, **args)
    theirs, theirs_ret = compute_vagen_bi_level_gae(at_ends, values, mask, ends, **args)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours_ret, theirs_ret)
    assert get_advantage_estimator("vagen_bi_level_gae").needs_critic


def test_the_vagen_preset_is_vagens_sokoban_script_and_trico_stays_ours():
    from ragen.trainer.config import load_config

    vagen = load_config(["algo=vagen"]).algo
    assert vagen.adv_estimator == "vagen_bi_level_gae" and vagen.use_critic
    assert vagen.reward_placement == "turn" and vagen.whiten_advantages
    assert (vagen.kl_coef, vagen.kl_type, vagen.kl_in_reward) == (0.001, "k1", True)
    assert (vagen.clip_ratio_low, vagen.clip_ratio_high) == (0.2, 0.2)
    assert (vagen.gamma_turn, vagen.lam_turn, vagen.gamma_token, vagen.lam_token) == (
        0.95, 1.0, 1.0, 1.0,
    )  # fmt: skip
    trico = load_config(["algo=trico"]).algo
    assert trico.adv_estimator == "bi_level_gae" and not trico.whiten_advantages
    assert trico.kl_coef == 0.0 and (trico.clip_ratio_low, trico.clip_ratio_high) == (0.2, 0.28)


def test_a_vagen_step_puts_the_kl_in_the_reward(tiny_model_dir, tmp_path):
    """One update with algo=vagen on a tiny model: the KL goes into the token rewards
    (actor/reward_kl is logged), the advantages are whitened (mean 0)."""
    import json

    from fakes import short_train_args

    from ragen.cli import main

    run = tmp_path / "run"
    args = short_train_args(tiny_model_dir, run, "algo=vagen", "trainer.total_steps=1")
    assert main([a for a in args if a != "algo=starpo-s"]) == 0
    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert "actor/reward_kl" in row and abs(row["actor/advantage_mean"]) < 1e-5
