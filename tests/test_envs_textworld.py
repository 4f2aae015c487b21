"""TextWorld text adventures: games generated per seed offline, admissible commands as
the vocabulary, TextWorld's rewards, the walkthrough oracle (also as SFT data), and a
short training run. Compiled games go to one cache folder per test session."""

from __future__ import annotations

import copy
import json
import random
import sys

import pytest
from fakes import short_train_args

from ragen.envs import make
from ragen.errors import MissingDependencyError

NEEDS = "needs textworld: pip install 'ragen[textworld]' (make test has it)"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    pytest.importorskip("textworld", reason=NEEDS)
    return str(tmp_path_factory.mktemp("textworld_games"))


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "textworld", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'ragen\[textworld\]'"):
        make("textworld")


def test_check_env(cache):
    from ragen.envs.checker import check_env

    check_env(make("textworld", cache_dir=cache), seeds=(0, 1))


def test_the_walkthrough_oracle_wins_with_textworlds_rewards(cache):
    env = make("textworld", cache_dir=cache)
    for seed in (0, 1, 2):
        obs = env.reset(seed)
        assert "Admissible commands: " in obs and "$$" not in obs  # no banner art
        walkthrough = env.walkthrough()
        assert len(walkthrough) == 3  # quest_length
        total, steps = 0.0, 0
        while not env.done:
            command = env.oracle_action()
            assert command == walkthrough[steps]  # no detour: the walkthrough itself
            obs, reward, terminated, truncated, info = env.step(command)
            total += reward
            steps += 1
        assert terminated and not truncated and info["success"]
        # the score (1 for the won game) plus 0.1 for each move along the quest
        assert total == pytest.approx(1.0 + 0.1 * len(walkthrough))


def test_only_admissible_commands_are_actions(cache):
    env = make("textworld", cache_dir=cache)
    env.reset(0)
    names = env.action_names
    assert "look" in names and env.render().endswith(", ".join(names))
    before = env.snapshot()
    _, reward, _, _, info = env.step("dance wildly")  # never sent to the game
    assert not info["action_is_valid"] and reward == 0 and env.snapshot() == before
    _, _, _, _, info = env.step("LOOK")  # admissible, changes nothing in the world
    assert info["action_is_valid"] and not info["action_is_effective"]
    _, reward, _, _, info = env.step(env.oracle_action())
    assert info["action_is_effective"] and reward == pytest.approx(0.1)
    # a detour: moving away from the quest costs the intermediate reward, and the
    # oracle, replanned from here, leads back
    env.reset(0)
    detour = next(c for c in env.action_names if c.startswith("go ") and c != env.oracle_action())
    _, reward, *_ = env.step(detour)
    assert reward == pytest.approx(-0.1)
    while not env.done:
        env.step(env.oracle_action())
    assert env.success


def test_step_limit_truncates_and_a_copy_replays_the_episode(cache):
    env = make("textworld", cache_dir=cache, max_steps=3)
    env.reset(1)
    for _ in range(3):
        _, _, terminated, truncated, _ = env.step("look")
    assert truncated and not terminated
    env.reset(1)
    env.step(env.oracle_action())
    twin = copy.deepcopy(env)
    assert twin.render() == env.render() and twin.snapshot() == env.snapshot()
    twin.step(twin.oracle_action())
    assert twin.snapshot() != env.snapshot()  # independent games
    twin.close()


def test_games_are_cached_and_difficulty_passes_through(cache):
    env = make("textworld", cache_dir=cache)
    path = env.game_file(0)
    stamp = path.stat().st_mtime_ns
    assert make("textworld", cache_dir=cache).game_file(0).stat().st_mtime_ns == stamp
    hard = make("textworld", cache_dir=cache, quest_length=5, nb_rooms=5)
    hard.reset(0)
    assert len(hard.walkthrough()) == 5
    with pytest.raises(ValueError, match="objective='vague'"):
        make("textworld", objective="vague")


def test_expert_data_for_sft_from_the_walkthrough(cache):
    from fakes import tiny_tokenizer

    from ragen.agent.rollout import RolloutConfig
    from ragen.sft.config import SFTConfig
    from ragen.sft.expert_data import make_expert_data

    rollout = RolloutConfig(max_turns=3, max_actions_per_turn=2, max_actions_per_trajectory=6)
    cfg = SFTConfig(
        env="textworld",
        env_config={"cache_dir": cache},
        episodes=2,
        actions_per_turn=2,  # plans two commands on a replayed copy of the game
        rollout=rollout,
    )
    data = make_expert_data(tiny_tokenizer(), cfg)
    assert len(data) == 2 and all(t.success for t in data)


def test_random_policy_rarely_wins(cache):
    env = make("textworld", cache_dir=cache, max_steps=20)
    wins = 0
    for seed in range(4):
        env.reset(seed)
        rng = random.Random(seed)
        while not env.done:
            env.step(env.random_action(rng))
        wins += env.success
    assert wins <= 2


def test_train_two_steps(tiny_model_dir, tmp_path, cache):
    from ragen.cli import main

    run = tmp_path / "run"
    args = [a for a in short_train_args(tiny_model_dir, run) if a != "env=sokoban"]
    extra = [
        "env=textworld",
        f"env.config.cache_dir={cache}",
        "env.train_states=2",  # two training games (each new game is compiled)
        "rollout.max_actions_per_turn=2",
    ]
    assert main([*args, *extra]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "val/success_rate" in rows[-1]


@pytest.mark.parametrize("value", ["nan", "inf", "-0.5", "abc"])
def test_a_weight_that_is_no_finite_number_is_refused_in_one_line(value, tmp_path, capsys):
    """Issue 55: `intermediate_reward=nan` was accepted, every reward became NaN and eval
    crashed in group_reward_std. The env refuses it (before TextWorld is imported)."""
    from ragen.cli import main
    from ragen.errors import EnvOptionError

    with pytest.raises(EnvOptionError, match="must be a finite number >= 0"):
        make("textworld", intermediate_reward=float(value) if value != "abc" else value)
    code = main(["eval", "--model", "oracle", "--env", "textworld", "--n", "2", "--out",
                 str(tmp_path), "--env-config", f"intermediate_reward={value}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "intermediate_reward" in err and "Fix: e.g. intermediate_reward=0.1" in err
