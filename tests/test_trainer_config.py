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
        (["env.train_states=-2"], "env.train_states"),
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


# every enumerated key, with a typo of a valid value: (override, full key, suggestion)
TYPOS = [
    ("algo.adv_estimator=gea", "algo.adv_estimator", "gae"),
    ("algo.loss_agg_mode=tokn-mean", "algo.loss_agg_mode", "token-mean"),
    ("algo.norm_method=mean_sdt", "algo.norm_method", "mean_std"),
    ("algo.norm_grouping=stat", "algo.norm_grouping", "state"),
    ("algo.kl_type=low_var_k", "algo.kl_type", "low_var_kl"),
    ("algo.filter.strategy=top-p", "algo.filter.strategy", "top_p"),
    ("algo.turn_baseline=turns", "algo.turn_baseline", "turn"),
    ("algo.advantage_tokens=responses", "algo.advantage_tokens", "response"),
    ("algo.reward_placement=trajectry", "algo.reward_placement", "trajectory"),
    ("rollout.prompt_style=compakt", "rollout.prompt_style", "compact"),
    ("rollout.template_strategy=delt", "rollout.template_strategy", "delta"),
    ("env=sokobn", "env.name", "sokoban"),
    ("model.dtype=bfloat61", "model.dtype", "bfloat16"),
    ("trainer.wandb_mode=ofline", "trainer.wandb_mode", "offline"),
]


@pytest.mark.parametrize("override, key, suggestion", TYPOS)
def test_enumerated_typo_exits_2_before_any_model_loads(
    override, key, suggestion, capsys, monkeypatch
):
    from ragen.cli import main
    from ragen.trainer import models

    def no_model(*args, **kwargs):
        pytest.fail("a model was loaded before the config was checked")

    # where the trainer's build_models finds them
    monkeypatch.setattr(models, "load_policy", no_model)
    monkeypatch.setattr(models, "resolve_model", no_model)
    assert main(["train", "model=tiny", override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"ragen train: error: {key}: unknown value")
    assert f"Did you mean {suggestion!r}?" in err and "Valid:" in err


@pytest.mark.parametrize(
    "override, key",
    [
        ("rollout.group_size=0", "rollout.group_size: must be >= 1"),
        ("rollout.env_groups=0", "rollout.env_groups: must be >= 1"),
        ("rollout.max_new_tokens=5000", "rollout.max_new_tokens:"),
        ("rollout.max_new_tokens=0", "rollout.max_new_tokens: must be >= 1"),
        ("algo.ppo_mini_batch_size=0", "algo.ppo_mini_batch_size: must be >= 1"),
        ("env.config.dim_rooms=[6,6]", "env.config.dim_rooms: environment 'sokoban' has no option"),
    ],
)
def test_errors_name_the_full_key_and_the_basic_problem_first(override, key):
    with pytest.raises(ConfigError) as err:
        load_config([override])
    assert str(err.value).startswith(key), str(err.value)
    assert "ppo_mini_batch_size<=" not in str(err.value)


def test_load_config_returns_the_typed_config():
    from ragen.agent.rollout import RolloutConfig
    from ragen.trainer.config import TrainConfig, to_dict, to_yaml

    cfg = load_config(
        ["rollout.max_new_tokens=48", "model.actor_lr=1e-3", "env.config.dim_room=[6,6]"]
    )
    assert isinstance(cfg, TrainConfig) and isinstance(cfg.rollout, RolloutConfig)
    assert cfg.rollout.max_new_tokens == 48 and cfg.model.actor_lr == 1e-3
    assert cfg.env.config == {"dim_room": [6, 6]}
    assert to_dict(cfg)["rollout"]["max_new_tokens"] == 48
    assert "max_new_tokens: 48" in to_yaml(cfg)


def test_ragen_error_is_one_line_and_a_bug_keeps_its_traceback(capsys, monkeypatch):
    from ragen.cli import main
    from ragen.trainer import config

    assert main(["train", "algo.kl_type=nope"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    monkeypatch.setenv("RAGEN_DEBUG", "1")  # the traceback of a user error, on request
    with pytest.raises(ConfigError):
        main(["train", "algo.kl_type=nope"])
    monkeypatch.delenv("RAGEN_DEBUG")

    def bug(overrides):
        raise KeyError("a genuine bug")

    monkeypatch.setattr(config, "load_config", bug)
    with pytest.raises(KeyError, match="a genuine bug"):  # not swallowed into exit code 2
        main(["train"])


def test_filter_metric_and_collapse_keys():
    cfg = load_config(
        [
            "algo.filter.strategy=min_p",
            "algo.filter.value=0.5",
            "algo.filter.metric=entropy",
            "trainer.on_collapse=rollback",
            "trainer.rollback_change=[model.actor_lr=*0.5,algo.filter.value=0.25]",
            "trainer.collapse.group_std_ratio=0.4",
        ]
    )
    assert cfg.algo.filter.metric == "entropy" and cfg.trainer.on_collapse == "rollback"
    assert cfg.trainer.collapse.group_std_ratio == 0.4
    from ragen.trainer.config import apply_rollback_change

    new, changed = apply_rollback_change(cfg, cfg.trainer.rollback_change)
    assert changed == {"model.actor_lr": [1e-6, 5e-7], "algo.filter.value": [0.5, 0.25]}
    assert new.model.actor_lr == 5e-7 and cfg.model.actor_lr == 1e-6  # a copy


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["algo.filter.metric=reward_variance"], "algo.filter.metric"),
        (["algo.filter.strategy=nucleus", "algo.filter.value=1.5"], "algo.filter.value"),
        (["trainer.collapse.entropy_ratio=1.5"], "trainer.collapse.entropy_ratio"),
        (["trainer.collapse.grad_norm_spike=1"], "trainer.collapse.grad_norm_spike"),
        (["trainer.max_rollbacks=-1"], "trainer.max_rollbacks"),
        (["trainer.rollback_change=[algo.use_critic=false]"], "trainer.rollback_change"),
    ],
)
def test_collapse_config_errors(overrides, expected):
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.")):
        load_config(overrides)


def test_rollback_change_is_dry_run_at_load():
    # keeping 1 group of 16 x group_size leaves less than one minibatch of 128
    overrides = [
        "rollout.env_groups=16",
        "rollout.group_size=8",
        "algo.ppo_mini_batch_size=128",
        "trainer.rollback_change=[algo.filter.value=0.05]",
    ]
    load_config(overrides)  # on_collapse=warn: the change is never applied
    with pytest.raises(ConfigError, match="would make the config invalid.*ppo_mini_batch_size"):
        load_config([*overrides, "trainer.on_collapse=rollback"])
