"""Potential-based progress shaping (``rollout.progress_reward``, ``Env.progress_potential``).

The potentials themselves against hand-checked states (Sokoban: optimal moves left over
those from the start, a deadlock at -2; FrozenLake: the solver's discounted chance of
reaching the goal, which satisfies its Bellman equation), then through the rollout: the
shaping of an episode telescopes to ``w * (Phi(s_T) - Phi(s_0))``, it is logged and kept
out of the prompt, and a bad weight or an env without a potential is one clear error.
"""

from __future__ import annotations

import pytest

from ragen.agent.env_manager import EnvStateManager
from ragen.agent.metrics import rollout_metrics
from ragen.agent.policies import OraclePolicy, RandomPolicy
from ragen.agent.rollout import RolloutConfig, run_rollout
from ragen.envs import registry
from ragen.envs.games.frozen_lake import discounted_success, oracle_policy, transitions
from ragen.envs.games.sokoban.level_files import parse_levels
from ragen.errors import ConfigError


def test_sokoban_potential_rises_by_one_over_d0_per_optimal_move():
    env = registry.make("sokoban")
    env.reset(seed=3)
    d0 = env.optimal_solution_length()
    assert env.progress_potential() == -1.0
    phis = [env.progress_potential()]
    while not env.done:
        env.step(env.oracle_action())
        phis.append(env.progress_potential())
    assert phis[-1] == 0.0 and len(phis) == d0 + 1
    assert all(b - a == pytest.approx(1 / d0) for a, b in zip(phis, phis[1:]))


def test_sokoban_deadlock_is_minus_two_and_detours_cost():
    # pushing the box up puts it against the top wall, off the target row: a deadlock
    level = parse_levels("######\n#    #\n# $. #\n# @  #\n######")
    env = registry.make("sokoban", levels=level)
    env.reset(seed=0)
    assert env.optimal_solution_length() == 3 and env.progress_potential() == -1.0
    env.step("right")  # a step away from the plan: 4 moves left
    assert env.progress_potential() == pytest.approx(-4 / 3)
    env.reset(seed=0)
    env.step("up")  # the push into the wall
    assert env.optimal_solution_length() is None
    assert env.progress_potential() == -2.0


def test_frozen_lake_potential_is_the_optimal_discounted_success():
    env = registry.make("frozen_lake")
    env.reset(seed=1)
    values = discounted_success(env.desc, env.p)
    flat = "".join(env.desc)
    assert values[flat.index("G")] == 1.0
    assert all(values[i] == 0.0 for i, ch in enumerate(flat) if ch == "H")
    # Bellman optimality: V(s) = max_a 0.9 * sum_s' P(s'|s, a) V(s') for every
    # non-terminal cell, and the oracle's action attains the max
    policy = oracle_policy(env.desc, env.p, 0.9)
    for s, ch in enumerate(flat):
        if ch not in "HG":
            q = [
                0.9 * sum(p * values[n] for p, n in transitions(env.desc, s, a, env.p))
                for a in range(4)
            ]
            assert values[s] == pytest.approx(max(q), abs=1e-9)
            assert q[policy[s]] == pytest.approx(max(q), abs=1e-9)
    assert env.progress_potential() == values[env._pos]


def _rollout(env, weight, policy=None, groups=4):
    cfg = RolloutConfig(
        max_turns=10,
        max_actions_per_turn=1,
        max_new_tokens=48,
        max_model_len=2048,
        progress_reward=weight,
    )
    manager = EnvStateManager(env, env_groups=groups, group_size=2, seed=5)
    policy = policy or OraclePolicy(epsilon=0.3, seed=2)
    return run_rollout(policy, manager, cfg, manager.seeds_for_step(0))


@pytest.mark.parametrize("env", ["sokoban", "frozen_lake"])
def test_rollout_adds_the_telescoping_shaping_and_logs_it(env):
    w = 2.0
    shaped = _rollout(env, w).trajectories
    plain = _rollout(env, 0.0).trajectories
    for s, p in zip(shaped, plain):  # same seeds, same moves: only the rewards differ
        assert [t.executed_actions for t in s.turns] == [t.executed_actions for t in p.turns]
        progress = [t.info["progress_reward"] for t in s.turns]
        assert [t.reward for t in s.turns] == pytest.approx(
            [t.reward + d for t, d in zip(p.turns, progress)]
        )
        assert "progress_reward" not in p.turns[0].info
        # the prompt's "last reward" is the env's reward (+ format shaping) only
        assert [t.prompt for t in s.turns] == [t.prompt for t in p.turns]
    # telescoping: a solved Sokoban episode earns w * (0 - (-1)) = w in total
    solved = [t for t in shaped if t.success]
    assert solved
    if env == "sokoban":
        for t in solved:
            assert sum(x.info["progress_reward"] for x in t.turns) == pytest.approx(w)
    metrics = rollout_metrics(shaped)
    assert "reward/progress" in metrics and "reward/progress" not in rollout_metrics(plain)


def test_bad_progress_weights_and_envs_without_a_potential_are_config_errors():
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="rollout.progress_reward"):
            RolloutConfig(progress_reward=bad).validate()
    with pytest.raises(ConfigError, match="has no progress potential"):
        _rollout("bandit", 1.0, policy=RandomPolicy(seed=0), groups=1)
