"""TextArena adapter: three single-player games offline, the contract, isolation."""

from __future__ import annotations

import random
import sys

import pytest

from ragen.envs import make
from ragen.errors import MissingDependencyError

GAMES = ["ta_tower_of_hanoi", "ta_guess_the_number", "ta_mastermind"]


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "textarena", None)  # import textarena -> ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'ragen\[textarena\]'"):
        make("ta_tower_of_hanoi")


@pytest.mark.parametrize("name", GAMES)
def test_check_env_and_the_oracle_wins(name):
    pytest.importorskip("textarena")
    from ragen.envs.checker import check_env

    env = make(name)
    check_env(env, seeds=(0, 1))
    for seed in range(4):
        env.reset(seed)
        steps = 0
        while not env.done:
            _, reward, terminated, truncated, info = env.step(env.oracle_action())
            steps += 1
        assert env.success and terminated and not truncated and reward == 1.0
        if name == "ta_tower_of_hanoi":
            assert steps == 7  # optimal for 3 disks


def test_rules_become_instructions_and_moves_the_vocabulary():
    pytest.importorskip("textarena")
    env = make("ta_tower_of_hanoi")
    assert "Tower of Hanoi with 3 disks" in env.instructions
    assert "'A C' moves from tower A" in env.instructions
    assert env.action_names == ["A B", "A C", "B A", "B C", "C A", "C B"]
    obs = env.reset(0)
    assert "A: [3, 2, 1]" in obs
    before = env.snapshot()
    # not a move of the game: invalid, nothing changes
    _, _, _, _, info = env.step("fly to the moon")
    assert not info["action_is_valid"] and env.snapshot() == before
    # a move the state forbids, twice (TextArena would end the game at the second one)
    for _ in range(3):
        obs, _, terminated, _, info = env.step("B A")
        assert info["action_is_valid"] and not info["action_is_effective"]
        assert "empty tower" in obs and not terminated
    assert env._core.state.game_state == {"towers": {"A": [3, 2, 1], "B": [], "C": []}}
    obs, _, _, _, info = env.step("[a c]")
    assert info["action_is_effective"] and "moved disk 1 from A to C" in obs


def test_hidden_state_follows_the_seed_and_global_random_is_untouched():
    pytest.importorskip("textarena")
    a, b = make("ta_guess_the_number"), make("ta_guess_the_number")
    secrets = []
    for env in (a, b):
        env.reset(3, rng_seed=7)
        secrets.append(env._core.game_number)
    assert secrets[0] == secrets[1]
    others = set()
    for seed in range(8):
        a.reset(seed)
        others.add(a._core.game_number)
    assert len(others) > 3  # the secret is drawn from the seed
    random.seed(123)
    expected = [random.random() for _ in range(3)]
    random.seed(123)
    first = random.random()
    env = make("ta_mastermind")
    env.reset(5)
    env.step(env.oracle_action())
    env.step("1 2 3 4")
    assert [first, random.random(), random.random()] == expected
    # a duplicate-digit code is none of the 360 codes of the game: an invalid action
    before = env.render()
    obs, _, _, _, info = env.step("1 1 2 3")
    assert not info["action_is_valid"] and obs == before


def test_guess_the_number_oracle_uses_only_the_hints():
    pytest.importorskip("textarena")
    env = make("ta_guess_the_number")
    env.reset(0)
    first = env.oracle_action()
    assert first == "10"  # the middle of 1..20, whatever the secret
    obs = env.step(first)[0]
    if not env.done:
        assert "higher" in obs or "lower" in obs


def test_eval_with_the_oracle_and_random_policies():
    pytest.importorskip("textarena")
    from ragen.agent.evaluate import evaluate

    oracle = evaluate("oracle", "ta_tower_of_hanoi", n=2, max_turns=8)
    assert oracle["success_rate"] == 1.0
    rand = evaluate("random", "ta_guess_the_number", n=2, max_turns=3)
    assert 0.0 <= rand["success_rate"] <= 1.0
