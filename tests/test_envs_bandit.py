"""Bandit: payout frequencies, per-trajectory randomness, name pairs and semantics."""

from __future__ import annotations

import math

import pytest

from ragen.envs import make
from ragen.envs.games.bandit import TEST_PAIRS, BanditEnv


def pull_many(env: BanditEnv, arm: str, n: int, seed: int = 0) -> list[float]:
    payouts = []
    for k in range(n):
        env.reset(seed, rng_seed=k)
        _, reward, terminated, truncated, info = env.step(arm)
        assert terminated and not truncated  # the one pull ends the MDP
        assert info["action_is_valid"] and info["payout"] == reward
        payouts.append(reward)
    return payouts


def test_payout_frequencies():
    env = make("bandit")
    n = 2000
    risky = pull_many(env, "Dragon", n)
    assert set(risky) <= {0.0, 1.0}
    hits = sum(risky)
    assert abs(hits - 0.25 * n) < 5 * math.sqrt(n * 0.25 * 0.75)
    assert set(pull_many(env, "phoenix", 50)) == {0.15}


def test_group_members_sharing_a_seed_draw_their_own_outcomes():
    env = make("bandit")
    outcomes = {tuple(pull_many(env, "DRAGON", 16, seed=s)) for s in range(3)}
    assert all(0 < sum(o) < 16 for o in outcomes)  # mixed outcomes inside each group
    # ... and the same (seed, rng_seed) is reproducible
    assert pull_many(env, "dragon", 16, seed=7) == pull_many(env, "dragon", 16, seed=7)


def test_display_order_is_randomized_per_seed_and_deterministic():
    env = make("bandit")
    orders = [tuple(env.reset(s) and env.action_names) for s in range(40)]
    assert set(orders) == {("Phoenix", "Dragon"), ("Dragon", "Phoenix")}
    assert orders == [tuple(env.reset(s) and env.action_names) for s in range(40)]
    obs = env.reset(0)
    assert "Phoenix" in obs and "Dragon" in obs and "0.25" not in env.instructions


def test_oracle_semantics_test_pairs_and_reversal():
    env = make("bandit")
    env.reset(0)
    assert env.oracle_action() == "Dragon" and env.high_arm == "Dragon"
    info = env.step("Phoenix")[-1]
    assert not info["success"] and not info["high_risk"]
    rev = make("bandit_reversed")
    rev.reset(0)
    assert rev.high_arm == "Phoenix" and rev.oracle_action() == "Phoenix"
    test = make("bandit_test")
    pairs = {frozenset(test.reset(s) and test.action_names) for s in range(60)}
    assert pairs <= {frozenset(p) for p in TEST_PAIRS} and len(pairs) >= 5
    for seed in range(10):
        test.reset(seed)
        safe, risky = next(p for p in TEST_PAIRS if set(p) == set(test.action_names))
        assert test.oracle_action() == risky and test.low_arm == safe
    # payouts decide the oracle: a generous safe arm beats the lottery
    generous = BanditEnv(low_payout=0.5)
    generous.reset(0)
    assert generous.oracle_action() == "Phoenix"


def test_invalid_choices_and_config_errors():
    env = make("bandit")
    obs = env.reset(0)
    for junk in ["", "phoenixx", "both", "Phoenix Dragon", "1"]:
        o, r, terminated, truncated, info = env.step(junk)
        assert (o, r, terminated, truncated, info["action_is_valid"]) == (
            obs,
            0.0,
            False,
            False,
            False,
        )
    assert env.single_turn is True
    with pytest.raises(ValueError, match="arm_pairs"):
        BanditEnv(arm_pairs="validation")
    with pytest.raises(ValueError, match="different"):
        BanditEnv(arm_pairs=[("Cat", "cat")])
    with pytest.raises(ValueError, match="high_prob"):
        BanditEnv(high_prob=2.0)
