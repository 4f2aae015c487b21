"""The gymnasium adapter: ANSI translation, seeding, presets, errors."""

from __future__ import annotations

import sys

import pytest

from ragen.envs import make
from ragen.envs.adapters.gymnasium_env import GymEnv, MissingDependencyError, ansi_to_text
from ragen.errors import RagenError

gym = pytest.importorskip("gymnasium")


def test_ansi_to_text_replaces_styles_then_strips():
    ansi = "\n\x1b[41mS\x1b[0mFFF\nFHFH\n"
    assert ansi_to_text(ansi) == "SFFF\nFHFH"
    assert ansi_to_text(ansi, [("41", "P")]) == "PFFF\nFHFH"
    nested = "|\x1b[34;1m\x1b[43mR\x1b[0m\x1b[0m: \x1b[35mG\x1b[0m|"
    assert ansi_to_text(nested, [("43", "T"), ("34", "P"), ("35", "D")]) == "|T: D|"
    assert ansi_to_text("a\x1b[2Kb", [("1", "{}{}")]) == "ab"


def test_frozen_lake_preset_shows_the_agent_and_is_seeded():
    env = make("gym_frozen_lake")
    obs = env.reset(0)
    assert obs.splitlines() == ["PFFF", "FHFH", "FFFH", "HFFG"]
    assert env.action_names == ["left", "down", "right", "up"]

    def trace(rng_seed):
        env.reset(0, rng_seed=rng_seed)
        return [env.step("right")[0] for _ in range(6)]

    assert trace(1) == trace(1)
    assert len({tuple(trace(k)) for k in range(8)}) > 1  # slips differ per trajectory rng


def test_taxi_preset_marks_taxi_passenger_destination_and_oracle_delivers():
    env = make("gym_taxi")
    obs = env.reset(3)
    grid = "".join(obs.splitlines()[1:6])
    assert grid.count("T") == 1 and grid.count("P") == 1 and grid.count("D") == 1
    total, steps = 0.0, 0
    while not env.done:
        _, reward, terminated, truncated, info = env.step(env.oracle_action())
        total += reward
        steps += 1
    assert info["success"] and total == 20 - (steps - 1) and steps <= 20
    assert terminated and not truncated


def test_generic_adapter_with_a_callable_and_errors():
    def build():
        return gym.make("FrozenLake-v1", render_mode="ansi", is_slippery=False)

    env = GymEnv(build, action_names=["W", "S", "E", "N"], ansi_styles=[("41", "@")])
    assert env.reset(0).startswith("@FFF")
    assert "w, s, e, n" in env.instructions
    info = env.step("e")[-1]
    assert info["action_is_valid"] and info["action_is_effective"]
    assert env.oracle_action() is None  # no tabular oracle requested
    with pytest.raises(ValueError, match="4 distinct names"):
        GymEnv("FrozenLake-v1", action_names=["a", "b"])
    with pytest.raises(ValueError, match="no usable gymnasium environment"):
        GymEnv(["NoSuchEnv-v0"], action_names=["a"])

    class BoxActions(gym.Env):
        action_space = gym.spaces.Box(-1, 1, (1,))
        observation_space = gym.spaces.Discrete(1)

    with pytest.raises(TypeError, match="Discrete"):
        GymEnv(BoxActions, action_names=["a"])


def _lake(max_episode_steps):
    """Non-slippery FrozenLake wrapped in gymnasium's ``TimeLimit``."""
    return GymEnv(
        lambda: gym.make(
            "FrozenLake-v1",
            render_mode="ansi",
            is_slippery=False,
            max_episode_steps=max_episode_steps,
        ),
        action_names=["left", "down", "right", "up"],
    )


def test_time_limit_truncation_passes_through():
    env = _lake(max_episode_steps=2)
    env.reset(0)
    assert env.step("left")[2:4] == (False, False)
    _, _, terminated, truncated, info = env.step("left")
    assert truncated and not terminated and not info["success"]
    assert env.done and env.truncated and not env.terminated
    assert env.step("right")[2:4] == (False, True)  # after the end: the same flags
    # the adapter's own limit truncates too (its counter is not in the observation)
    own = GymEnv(
        lambda: gym.make("FrozenLake-v1", render_mode="ansi"), ["l", "d", "r", "u"], max_steps=1
    )
    own.reset(0)
    assert own.step("l")[2:4] == (False, True)


def test_terminated_and_truncated_together_pass_through_unchanged():
    """gymnasium's TimeLimit truncates on the step that also reaches the goal."""
    env = _lake(max_episode_steps=6)
    env.reset(0)
    for action in ["down", "down", "right", "right", "down"]:
        assert env.step(action)[2:4] == (False, False)
    _, reward, terminated, truncated, info = env.step("right")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, True, True)


def test_holes_terminate():
    env = _lake(max_episode_steps=100)
    env.reset(0)
    env.step("right")
    _, reward, terminated, truncated, _ = env.step("down")  # into the hole at (1, 1)
    assert (reward, terminated, truncated) == (0.0, True, False)


def test_missing_gymnasium_gives_an_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "gymnasium", None)  # makes `import gymnasium` fail
    with pytest.raises(MissingDependencyError, match=r"pip install 'gymnasium>=0.29'") as err:
        make("gym_taxi")
    assert isinstance(err.value, ImportError) and isinstance(err.value, RagenError)
