"""The demo's budgets: what each env's SFT and RL stages are actually configured with."""

import argparse
import dataclasses

import pytest

import ragen.sft.trainer as sft_trainer
import ragen.trainer.starpo as starpo
from ragen.demo import Demo, budget_from_args
from ragen.recipes import BUDGETS, FROZEN_LAKE_SFT, GRID_SFT, SOKOBAN_SFT
from ragen.sft.config import SFTConfig


def test_full_budget_plays_the_grids_with_one_move_replies_and_the_bandit_with_thoughts():
    full = BUDGETS["full"]
    for env in ("frozen_lake", "sokoban"):
        assert full.reasoning_of(env) == "no_think" and full.new_tokens(env) == 16
    assert full.reasoning_of("bandit") == "free_think"
    assert full.new_tokens("bandit") == full.max_new_tokens
    # one format asked for on the command line applies to every env, grids included
    chosen = budget_from_args(
        argparse.Namespace(budget="full", reasoning="grounding", reasoning_reward=[])
    )
    assert chosen.reasoning_of("sokoban") == "grounding"
    assert chosen.new_tokens("sokoban") == full.structured_max_new_tokens
    # the classic budget is the demo the earlier studies measured: one recipe, free_think
    classic = BUDGETS["classic"]
    assert classic.reasoning_of("sokoban") == "free_think" and not classic.sft_overrides


def test_stage_sft_applies_the_envs_recipe_over_the_shared_fields(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(sft_trainer, "run_sft", lambda model, out, cfg, log: seen.update(cfg=cfg))
    demo = Demo(tmp_path, BUDGETS["full"], ["sokoban", "bandit"])
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text("{}")

    demo.stage_sft("sokoban")
    cfg = seen["cfg"]
    for key, value in SOKOBAN_SFT.items():
        assert getattr(cfg, key) == value, key
    assert cfg.labels == "expert" and cfg.rollout.reasoning == "no_think"
    assert cfg.rollout.max_new_tokens == 16
    # Sokoban's warm start stops after 2 epochs of the grids' recipe (a third only for a
    # run still on the loss plateau); FrozenLake's runs 3
    assert cfg.epochs == 2 and cfg.end_fit_min_reply_accuracy == 0.4
    assert cfg.end_fit_extra_epochs == 2 and cfg.heldout_episodes > 0
    shared = {k: v for k, v in SOKOBAN_SFT.items() if k != "end_fit_min_reply_accuracy"}
    assert {**shared, "epochs": 3} == {**GRID_SFT, "epochs": 3}
    demo.stage_sft("frozen_lake")
    assert seen["cfg"].epochs == 3 == BUDGETS["full"].sft_epochs
    # ... or stops earlier, once the warm start solves 40% of its own SFT states
    assert seen["cfg"].stop_at_success == 0.4 == FROZEN_LAKE_SFT["stop_at_success"]
    assert seen["cfg"].success_check_every == 20 and seen["cfg"].success_check_episodes == 128
    assert {k: v for k, v in FROZEN_LAKE_SFT.items() if k in GRID_SFT} == GRID_SFT

    demo.stage_sft("bandit")  # no recipe of its own: the shared fields
    cfg = seen["cfg"]
    assert cfg.lr == BUDGETS["full"].sft_lr and cfg.aux_reasoning is None
    assert cfg.labels == "played" and cfg.heldout_episodes == 0


@pytest.fixture
def rl_config_of(tmp_path, monkeypatch):
    """``rl_config_of(budget, env)``: the ``ragen train`` config ``Demo.stage_rl`` builds
    for ``env`` (the trainer replaced by a recorder; a stand-in warm start)."""
    seen = {}

    class Recorder:
        def __init__(self, cfg):
            seen["cfg"] = cfg

        def train(self):
            pass

    monkeypatch.setattr(starpo, "StarPOTrainer", Recorder)

    def run(budget, env):
        demo = Demo(tmp_path, budget, [env])
        demo.sft_dir(env).mkdir(parents=True, exist_ok=True)
        (demo.sft_dir(env) / "config.json").write_text("{}")
        demo.stage_rl(env)
        return seen["cfg"]

    return run


def test_full_budget_trains_sokoban_by_dynamic_sampling_without_a_critic(rl_config_of):
    cfg = rl_config_of(BUDGETS["full"], "sokoban")
    assert cfg.algo.name == "drgrpo" and not cfg.algo.use_critic
    assert cfg.model.actor_lr == 1e-4
    assert cfg.algo.dynamic_sampling.enabled and cfg.algo.filter.value == 1.0
    assert cfg.algo.ppo_mini_batch_size == 640
    assert cfg.trainer.total_steps == 130
    assert cfg.rollout.reasoning == "no_think" and cfg.rollout.max_new_tokens == 16


def test_stage_rl_passes_the_envs_critic_lr(rl_config_of):
    budget = dataclasses.replace(BUDGETS["toy"], critic_lr={"sokoban": 1e-5})
    assert rl_config_of(budget, "sokoban").model.critic_lr == 1e-5


def test_full_budget_trains_frozen_lake_on_1024_episodes_a_step_without_a_critic(rl_config_of):
    cfg = rl_config_of(BUDGETS["full"], "frozen_lake")
    assert cfg.algo.name == "drgrpo" and not cfg.algo.use_critic
    assert cfg.rollout.env_groups * cfg.rollout.group_size == 1024
    assert cfg.algo.filter.value == 1.0 and not cfg.algo.dynamic_sampling.enabled
    # one optimizer step per training step: every turn of the 1,024 episodes
    assert cfg.algo.ppo_mini_batch_size >= 1024 * cfg.rollout.max_turns
    assert cfg.model.actor_lr == 5e-4 and cfg.trainer.total_steps == 60


def test_stage_rl_takes_the_envs_own_algorithm_and_groups(rl_config_of):
    budget = dataclasses.replace(
        BUDGETS["toy"], algo={"frozen_lake": "drgrpo"}, env_groups_by_env={"frozen_lake": 5}
    )
    cfg = rl_config_of(budget, "frozen_lake")
    assert cfg.algo.name == "drgrpo" and not cfg.algo.use_critic
    assert cfg.rollout.env_groups == 5
    cfg = rl_config_of(budget, "sokoban")  # unset: StarPO-S at the shared number of groups
    assert cfg.algo.name == "starpo-s" and cfg.rollout.env_groups == 2


def test_results_written_under_the_old_rl_column_name_still_load(tmp_path):
    import json

    old = {"sokoban": {"after RL (StarPO-S)": {"success_rate": 0.5}, "random": {}}}
    (tmp_path / "results.json").write_text(json.dumps(old))
    demo = Demo(tmp_path, BUDGETS["toy"], ["sokoban"])
    assert demo.results["sokoban"]["after RL"] == {"success_rate": 0.5}
    assert "after RL (StarPO-S)" not in demo.results["sokoban"]


def test_the_longest_pipelines_are_started_first(tmp_path):
    demo = Demo(tmp_path, BUDGETS["full"], ["bandit", "frozen_lake", "sokoban"])
    order = sorted(demo.envs, key=demo.turns_of_work, reverse=True)
    assert order[-1] == "bandit"  # two workers: the grids start at once, the bandit after


@pytest.mark.parametrize("name", sorted(BUDGETS))
def test_every_budgets_per_env_sft_fields_are_sft_config_fields(name):
    fields = {f.name for f in dataclasses.fields(SFTConfig)}
    for env, changes in BUDGETS[name].sft_overrides.items():
        assert set(changes) <= fields, (name, env)


def test_an_unknown_sft_field_is_a_usage_error_naming_it(tmp_path):
    from ragen.errors import UsageError

    budget = dataclasses.replace(BUDGETS["toy"], sft_overrides={"sokoban": {"learning_rate": 1}})
    demo = Demo(tmp_path, budget, ["sokoban"])
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text("{}")
    with pytest.raises(UsageError, match="learning_rate"):
        demo.stage_sft("sokoban")
