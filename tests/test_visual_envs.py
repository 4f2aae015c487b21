"""Visual grid envs (VAGEN): pictures as observations, the text envs' dynamics unchanged."""

import random

import numpy as np
import pytest

import ragen.envs as envs
from ragen.envs.checker import EnvCheckError, check_env
from ragen.envs.games.visual_grids import VisualSokobanEnv
from ragen.envs.visual import IMAGE_PLACEHOLDER, has_image_observations
from ragen.errors import EnvConfigError

PAIRS = [("sokoban_visual", "sokoban"), ("frozen_lake_visual", "frozen_lake")]


@pytest.mark.parametrize("name", ["sokoban_visual", "frozen_lake_visual"])
@pytest.mark.parametrize("text_grid", [False, True])
def test_visual_envs_pass_the_checker(name, text_grid):
    check_env(envs.make(name, text_grid=text_grid), seeds=(0, 1))


@pytest.mark.parametrize("visual,text", PAIRS)
def test_same_dynamics_seeds_and_invalid_actions_as_the_text_env(visual, text):
    for seed in (0, 3, 11):
        v, t = envs.make(visual, text_grid=True), envs.make(text)
        v.reset(seed, rng_seed=seed + 100), t.reset(seed, rng_seed=seed + 100)
        assert v.grid_observation() == t.render("text") == v.render("grid")
        assert v.state_key() == t.state_key()  # the held-out split sees the same states
        rng = random.Random(seed)
        for _ in range(15):
            action = rng.choice(["up", "down", "left", "right", "jump", "", "U"])
            obs_v, r_v, term_v, trunc_v, info_v = v.step(action)
            obs_t, r_t, term_t, trunc_t, info_t = t.step(action)
            assert obs_v == f"{IMAGE_PLACEHOLDER}\n{obs_t}"
            assert (r_v, term_v, trunc_v, info_v) == (r_t, term_t, trunc_t, info_t)
            if term_v or trunc_v:
                break


@pytest.mark.parametrize("name,size", [("sokoban_visual", 84), ("frozen_lake_visual", 84)])
def test_observation_is_a_uint8_picture_of_the_state(name, size):
    env = envs.make(name)
    assert env.reset(0) == IMAGE_PLACEHOLDER and has_image_observations(env)
    (image,) = env.observation_images()
    assert image.shape == (size, size, 3) and image.dtype == np.uint8
    assert np.array_equal(image, env.render("rgb"))
    again = envs.make(name)
    again.reset(0)
    assert np.array_equal(again.observation_images()[0], image)  # a pure function of the seed
    assert "Symbols:" not in env.instructions and "picture" in env.instructions
    assert not has_image_observations(envs.make(name.removesuffix("_visual")))


def test_cell_size_sets_the_picture_size_and_unknown_keys_fail_clearly():
    env = envs.make("sokoban_visual", cell_size=10, dim_room=(7, 8))
    env.reset(0)
    assert env.observation_images()[0].shape == (70, 80, 3)
    with pytest.raises(EnvConfigError, match="cell_size, text_grid"):
        envs.make("sokoban_visual", tile_size=10)


def test_checker_catches_a_picture_that_ignores_the_state():
    class Frozen(VisualSokobanEnv):
        def observation_images(self):
            return [np.zeros((84, 84, 3), np.uint8)]

    with pytest.raises(EnvCheckError, match="image did not"):
        check_env(Frozen(), seeds=(0,))

    class WrongType(VisualSokobanEnv):
        def observation_images(self):
            return [self.render("rgb").astype(np.float32)]

    with pytest.raises(EnvCheckError, match="uint8"):
        check_env(WrongType(), seeds=(0,))


def test_reasoning_formats_and_rule_checked_rewards_apply_to_visual_envs():
    """Stating the state from the picture is scored against the same facts as the text
    env's (the expert writes them truthfully, so it earns full scores)."""
    from ragen.agent import EnvStateManager, RolloutConfig, run_rollout
    from ragen.agent.policies import OraclePolicy

    manager = EnvStateManager("sokoban_visual", env_groups=2, group_size=1, seed=0)
    config = RolloutConfig(max_turns=2, reasoning="grounding_world_modeling", grounding_reward=1.0)
    result = run_rollout(OraclePolicy(), manager, config, manager.seeds_for_step(0))
    turns = [turn for traj in result.trajectories for turn in traj.turns]
    assert turns and all(turn.format_ok for turn in turns)
    for turn in turns:
        scores = turn.info["reasoning_scores"]
        assert scores["grounding"] == scores["world_model"] == 1.0
        assert turn.observation == IMAGE_PLACEHOLDER  # the text showed no grid
