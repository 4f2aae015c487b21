"""The training config describes itself: every key's help, type, choices and range sit on
its field, and validation, ``--help-config``, ``--print-config`` and docs/CONFIG.md all
come from there."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ragen.algo import registry
from ragen.cli import main
from ragen.config_fields import option
from ragen.trainer.config import ConfigError, TrainConfig, load_config
from ragen.trainer.config.describe import describe, markdown

DOC = Path(__file__).resolve().parent.parent / "docs" / "CONFIG.md"


def test_docs_config_md_is_generated_from_the_fields():
    assert DOC.read_text() == markdown(), (
        "docs/CONFIG.md is stale: regenerate it with "
        "`ragen train --help-config markdown > docs/CONFIG.md`"
    )


def test_every_key_has_help_and_the_doc_lists_each_once():
    infos = describe()
    keys = [i.key for i in infos]
    assert len(keys) == len(set(keys)) > 120
    bare = [i.key for i in infos if len(i.help) <= 10]
    assert not bare, f"declare these keys with option(default, help, ...): {bare}"
    for key in ("algo.gamma", "algo.clip_ratio_low", "algo.kl_coef", "trainer.collapse.window"):
        assert f"| `{key}` |" in markdown()
    with pytest.raises(TypeError, match="help"):
        option(1)  # a key without help cannot be declared


def test_what_reads_a_key_comes_from_the_registry():
    info = {i.key: i for i in describe()}
    assert "read by the estimators gae, masked_gae, reinforce_plus_plus" in info["algo.gamma"].help
    assert "read by the policy loss ppo" in info["algo.clip_ratio_high"].help
    assert info["algo.adv_estimator"].accepts.startswith("one of: bi_level_gae, drgrpo, gae")
    assert info["algo.gamma"].accepts == "in [0, 1]"
    assert info["trainer.keep_last"].accepts == "null or >= 1"


def test_help_config_lists_every_key(capsys):
    assert main(["train", "--help-config"]) == 0
    out = capsys.readouterr().out
    for info in describe():
        assert f"\n{info.key} = " in out, info.key
    assert "model.weight_decay = 0.0  (float)\n    AdamW weight decay" in out


def test_print_config_has_the_help_and_loads_back(capsys, tmp_path):
    overrides = ["env=bandit", "model=tiny", "algo=starpo-s", "env.config.high_prob=0.3"]
    assert main(["train", *overrides, "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert "  # discount per token" in printed and "\n  gamma: 1.0\n" in printed
    assert "\n    'on': success\n" in printed  # YAML 1.1 would read a bare on: as true
    path = tmp_path / "printed.yaml"
    path.write_text(printed)
    assert load_config([f"config={path}"]) == load_config(overrides)


@pytest.mark.parametrize(
    "override, message",
    [  # the three keys that were never checked, and a few from each section
        ("model.weight_decay=-0.1", "model.weight_decay: must be >= 0, got -0.1"),
        ("trainer.val_temperature=-1", "trainer.val_temperature: must be >= 0, got -1"),
        ("algo.grad_clip=0", "algo.grad_clip: must be > 0, got 0"),
        ("algo.clip_ratio_low=1.5", "algo.clip_ratio_low: must be in [0, 1), got 1.5"),
        ("model.lora.dropout=1", "model.lora.dropout: must be in [0, 1), got 1"),
        ("trainer.keep_last=0", "trainer.keep_last: must be null or >= 1, got 0"),
        ("algo.policy_loss=ppo2", "algo.policy_loss: unknown value 'ppo2'. Did you mean 'ppo'?"),
        ("trainer.collapse.signals=[entropy,grad]", "trainer.collapse.signals: unknown value"),
        ("env.curriculum.advance_at=0", "env.curriculum.advance_at: must be in (0, 1]"),
    ],
)
def test_ranges_and_choices_come_from_the_fields(override, message):
    with pytest.raises(ConfigError) as err:
        load_config([override])
    assert str(err.value).startswith(message), str(err.value)


def test_what_an_estimator_needs_is_asked_of_the_registry():
    @registry.register_advantage_estimator("test_turn_credit")
    def turn_credit(token_level_rewards, response_mask, turn_end_mask, index):
        return token_level_rewards, token_level_rewards

    try:  # no list of names in the config: a new estimator is checked like the built-ins
        with pytest.raises(ConfigError, match="algo.reward_placement: test_turn_credit"):
            load_config(["algo.adv_estimator=test_turn_credit", "algo.use_critic=false"])
        with pytest.raises(ConfigError, match="rollout.group_size: group baselines"):
            load_config(["algo.adv_estimator=test_turn_credit", "algo.reward_placement=turn",
                         "rollout.group_size=1", "algo.ppo_mini_batch_size=1"])  # fmt: skip
        with pytest.raises(ConfigError, match="critic-free estimator .*test_turn_credit"):
            load_config(["algo.adv_estimator=gae", "algo.use_critic=false"])
    finally:
        registry._REGISTRY.pop("test_turn_credit")


def test_a_registered_policy_loss_is_selectable_and_called_with_its_knobs():
    seen = {}

    @registry.register_policy_loss("test_plain_pg")
    def plain_pg(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
                 norm_constant, denominator, clip_ratio_c=3.0):  # fmt: skip
        seen["clip_ratio_c"] = clip_ratio_c
        return -(advantages * log_prob * response_mask).sum(), {}

    try:
        cfg = load_config(["algo.policy_loss=test_plain_pg"])
        assert isinstance(cfg, TrainConfig) and cfg.algo.policy_loss == "test_plain_pg"
        ones = torch.ones(1, 2)
        loss = registry.get_policy_loss("test_plain_pg")
        loss(old_log_prob=ones, log_prob=ones, advantages=ones, response_mask=ones,
             loss_agg_mode="token-mean", norm_constant=None, denominator=None,
             clip_ratio_low=0.2, clip_ratio_c=5.0)  # fmt: skip
        assert seen == {"clip_ratio_c": 5.0}  # ppo's clip_ratio_low dropped, its own kept
        with pytest.raises(TypeError, match="clip_ratio_lo"):
            loss(old_log_prob=ones, log_prob=ones, advantages=ones, response_mask=ones,
                 loss_agg_mode="token-mean", norm_constant=None, denominator=None,
                 clip_ratio_lo=0.2)  # fmt: skip
    finally:
        registry._POLICY_LOSSES.pop("test_plain_pg")
