"""Presets, overrides and the errors a user sees for bad configuration."""

import pytest

from ragen.trainer.config import ConfigError, load_config, preset_names


def test_presets_compose_and_overrides_win():
    cfg = load_config(
        [
            "env=bandit",
            "algo=starpo-s",
            "model=tiny",
            "trainer.total_steps=7",
            "rollout.group_size=4",
            "algo.ppo_mini_batch_size=4",
        ]
    )
    assert cfg.env.name == "bandit"
    assert cfg.rollout.max_turns == 1  # from the bandit env preset
    assert (
        cfg.algo.filter.value == 0.25
        and cfg.algo.kl_coef == 0.0
        and cfg.algo.clip_ratio_high == 0.28
    )
    assert cfg.model.path == "tiny:micro"
    assert cfg.trainer.total_steps == 7 and cfg.rollout.group_size == 4


def test_every_algo_preset_resolves():
    assert {"starpo", "starpo-s", "grpo", "drgrpo", "brpo", "arpo", "trico"} <= set(
        preset_names("algo")
    )
    for name in preset_names("algo"):
        cfg = load_config([f"algo={name}", "algo.ppo_mini_batch_size=8"])
        assert cfg.algo.name == name


def test_env_name_without_preset_and_model_path():
    cfg = load_config(["env=sokoban_large", "model=/some/folder"])
    assert cfg.env.name == "sokoban_large" and cfg.model.path == "/some/folder"


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["trainer.totl_steps=3"], "trainer.total_steps"),  # typo -> suggestion
        (["trainer.total_steps=abc"], "trainer.total_steps"),  # wrong type
        (["algo=starpo-z"], "starpo-s"),  # unknown preset -> suggestion
        (["env=sokobn"], "env.name"),
        (["algo=trico", "algo.reward_placement=trajectory"], "algo.reward_placement"),
        (["algo=trico", "rollout.context_window=1"], "algo.reward_placement"),
        (["algo.turn_baseline=episode"], "algo.turn_baseline"),
        (["algo=starpo", "algo.use_critic=false"], "algo.use_critic"),
        (
            [
                "algo=starpo-s",
                "rollout.env_groups=4",
                "rollout.group_size=4",
                "algo.ppo_mini_batch_size=32",
            ],
            "algo.ppo_mini_batch_size",
        ),
        (["algo=grpo", "rollout.group_size=1", "algo.ppo_mini_batch_size=1"], "rollout.group_size"),
        (["trainer.total_steps"], "KEY=VALUE"),
        (["algo.filter.strategy=best"], "algo.filter.strategy"),
        (["trainer.resume=/does/not/exist"], "trainer.resume"),
    ],
)
def test_config_errors_name_the_key(overrides, expected):
    with pytest.raises(ConfigError) as err:
        load_config(overrides)
    assert expected in str(err.value)


def test_filter_minibatch_message_suggests_fix():
    with pytest.raises(ConfigError, match="keeps 16 trajectories"):
        load_config(
            [
                "algo=starpo-s",
                "rollout.env_groups=4",
                "rollout.group_size=16",
                "algo.ppo_mini_batch_size=32",
            ]
        )


def test_windowed_context_counts_one_sample_per_turn_in_the_minibatch_check():
    # context_window=0 is a real window (each turn its own sample), not "no window"
    base = ["algo=starpo-s", "rollout.env_groups=4", "rollout.group_size=4"]
    windowed = [*base, "rollout.max_turns=5", "algo.ppo_mini_batch_size=16"]
    assert load_config([*windowed, "rollout.context_window=0"]).rollout.context_window == 0
    with pytest.raises(ConfigError, match="keeps 4 trajectories"):
        load_config(windowed)  # full history: 1 group x 4 samples < 16


def test_cli_prints_config_and_reports_errors(capsys):
    from ragen.cli import main

    assert main(["train", "env=bandit", "--print-config"]) == 0
    assert "name: bandit" in capsys.readouterr().out
    assert main(["train", "trainer.bogus=1"]) == 2
    assert "unknown config key 'trainer.bogus'" in capsys.readouterr().err
