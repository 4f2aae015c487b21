"""Reasoning formats through the rollout, SFT data, config and trainer.

The parsing and the scores themselves are tested by hand-built cases in
test_reasoning_formats.py and test_reasoning_rewards.py; here: the expert writes every
format so that it parses and earns full reasoning scores, weights add exactly the
weighted scores to the turn reward, a malformed reply earns nothing, bad settings are
one clear error, and a training run logs the three rewards.
"""

from __future__ import annotations

import json

import pytest
from fakes import ScriptedEngine, short_train_args, tiny_tokenizer

from ragen.agent.env_manager import EnvStateManager
from ragen.agent.policies import ModelPolicy, OraclePolicy, RandomPolicy
from ragen.agent.reasoning import REASONING_FORMATS, SECTIONS, parse_reply
from ragen.agent.rollout import RolloutConfig, format_rewards, run_rollout
from ragen.errors import ConfigError

STRUCTURED = [f for f in REASONING_FORMATS if SECTIONS[f]]
GRIDS = ["sokoban", "frozen_lake", "frozen_lake_det"]


def _config(**kw):
    base = dict(max_turns=6, max_actions_per_turn=1, max_new_tokens=96, max_model_len=4096)
    return RolloutConfig(**{**base, **kw})


def _oracle_rollout(env, cfg, epsilon=0.0, groups=4, tokenizer=None):
    manager = EnvStateManager(env, env_groups=groups, group_size=2, seed=3)
    policy = OraclePolicy(epsilon=epsilon, seed=1, tokenizer=tokenizer)
    return run_rollout(policy, manager, cfg, manager.seeds_for_step(0))


@pytest.mark.parametrize("env", GRIDS)
@pytest.mark.parametrize("fmt", STRUCTURED)
def test_expert_replies_parse_and_earn_full_reasoning_scores(env, fmt):
    # epsilon 0.5: random moves too are stated, planned and predicted truthfully
    result = _oracle_rollout(env, _config(reasoning=fmt), epsilon=0.5)
    expected = set(format_rewards(fmt))
    turns = [turn for t in result.trajectories for turn in t.turns]
    assert turns
    full = 0
    for turn in turns:
        assert turn.format_ok, turn.info["format_error"]
        assert parse_reply(turn.response, fmt).format_ok
        assert set(turn.info["reasoning_scores"]) == expected
        scores = set(turn.info["reasoning_scores"].values())
        # a move that changes the state earns full marks; one that changes nothing (a
        # random wall bump) earns nothing, however truthfully it is described
        assert scores in ({1.0}, {0.0}), turn.response
        full += scores == {1.0}
        if scores == {0.0} and env != "frozen_lake":  # deterministic: it did not move
            assert turn.info["action_is_effective"] == [False], turn.response
        assert turn.info["reasoning_reward"] == 0.0  # scored and logged, not rewarded
    assert full > len(turns) // 2


@pytest.mark.parametrize("fmt", STRUCTURED)
def test_expert_sft_samples_round_trip_through_the_parser(fmt):
    tok = tiny_tokenizer()
    result = _oracle_rollout("sokoban", _config(reasoning=fmt, context_window=0), 0.2, 2, tok)
    for t in result.trajectories:
        response = [i for i, m in zip(t.input_ids, t.response_mask) if m]
        text = tok.decode(response, skip_special_tokens=True)
        parsed = parse_reply(text.strip(), fmt)
        assert parsed.format_ok, (parsed.error, text)
        assert parsed.actions == t.turns[t.turn_index].actions


def test_reasoning_weights_add_exactly_the_weighted_scores():
    weights = dict(grounding_reward=0.3, world_model_reward=0.2, consistency_reward=0.1)
    plain = _oracle_rollout("sokoban", _config(reasoning="grounding_world_modeling"))
    paid = _oracle_rollout("sokoban", _config(reasoning="grounding_world_modeling", **weights))
    for a, b in zip(plain.trajectories, paid.trajectories):
        assert len(a.turns) == len(b.turns)
        for ta, tb in zip(a.turns, b.turns):
            assert tb.reward == pytest.approx(ta.reward + 0.6)  # all three scores are 1
            assert tb.env_reward == ta.env_reward
    m_plain = sum(t.episode_reward for t in plain.trajectories)
    m_paid = sum(t.episode_reward for t in paid.trajectories)
    n_turns = sum(t.num_turns for t in paid.trajectories)
    assert m_paid - m_plain == pytest.approx(0.6 * n_turns)


def test_free_think_consistency_is_scored_for_the_expert_template():
    result = _oracle_rollout("frozen_lake", _config(reasoning="free_think", consistency_reward=1.0))
    for turn in (turn for t in result.trajectories for turn in t.turns):
        assert turn.info["reasoning_scores"] == {"consistency": 1.0}
        assert turn.reward == pytest.approx(turn.env_reward + 1.0)


def test_random_policy_thought_names_no_action_so_it_is_inconsistent():
    manager = EnvStateManager("sokoban", env_groups=2, group_size=1, seed=0)
    result = run_rollout(RandomPolicy(seed=0), manager, _config(), manager.seeds_for_step(0))
    scores = [turn.info["reasoning_scores"] for t in result.trajectories for turn in t.turns]
    assert scores and all(s == {"consistency": 0.0} for s in scores)


def test_malformed_reply_earns_no_reasoning_reward_and_executes_nothing():
    tok = tiny_tokenizer()
    engine = ScriptedEngine(tok, lambda prompt, call, row: "<think>player (1,1)</think>up")
    manager = EnvStateManager("sokoban", env_groups=1, group_size=1, seed=0)
    cfg = _config(reasoning="grounding", grounding_reward=1.0, consistency_reward=1.0, max_turns=2)
    (t,) = run_rollout(
        ModelPolicy(engine, tok), manager, cfg, manager.seeds_for_step(0)
    ).trajectories
    for turn in t.turns:
        assert not turn.format_ok and turn.executed_actions == []
        assert turn.info["reasoning_scores"] == {"grounding": 0.0, "consistency": 0.0}
        assert turn.reward == pytest.approx(cfg.format_penalty)


def test_a_wrong_statement_scores_its_share_of_true_facts():
    tok = tiny_tokenizer()
    manager = EnvStateManager("sokoban", env_groups=1, group_size=1, seed=0)
    manager.reset(manager.seeds_for_step(0))
    env = manager.envs[0]
    facts = env.state_facts()  # player, box, target: state two right, one wrong
    wrong = f"{facts[0]}; {facts[1]}; target (0,0)"

    def respond(prompt, call, row):
        return (
            f"<think><observation>{wrong}</observation><reasoning>I go up.</reasoning>"
            "</think><answer>up</answer>"
        )

    engine = ScriptedEngine(tok, respond)
    cfg = _config(reasoning="grounding", max_turns=1)
    (t,) = run_rollout(
        ModelPolicy(engine, tok), manager, cfg, manager.seeds_for_step(0)
    ).trajectories
    assert t.turns[0].info["reasoning_scores"]["grounding"] == pytest.approx(2 / 3)
    assert t.turns[0].info["reasoning_scores"]["consistency"] == 1.0


def test_structured_prompts_teach_the_format_and_free_think_wording_is_unchanged():
    from ragen.agent import prompts

    free = prompts.system_message("Rules.", "free_think", "||", 1)
    assert free == (
        "Rules.\n\nRespond in exactly this format and nothing else:\n"
        "<think>your reasoning</think><answer>action1 || action2</answer>\n"
        "Give exactly one action in the answer."
    )
    gwm = prompts.system_message(
        "Rules.", "grounding_world_modeling", "||", 1, fact_kinds=("player", "box"),
        prediction_kinds=("player",),
    )  # fmt: skip
    for tag in ("<observation>", "<reasoning>", "<prediction>", "player", "box"):
        assert tag in gwm
    compact = prompts.system_message(
        "", "grounding", "||", 1, style="compact", action_names=["up"], fact_kinds=("player",)
    )
    assert "<observation>" in compact and "player" in compact


def test_bad_reasoning_settings_are_one_clear_error():
    with pytest.raises(ConfigError, match="rollout.reasoning"):
        _config(reasoning="chain_of_thought").validate()
    with pytest.raises(ConfigError, match="rollout.grounding_reward.*free_think"):
        _config(grounding_reward=0.5).validate()
    with pytest.raises(ConfigError, match="rollout.consistency_reward.*no_think"):
        _config(reasoning="no_think", consistency_reward=0.5).validate()
    with pytest.raises(ConfigError, match=">= 0"):
        _config(reasoning="grounding", grounding_reward=-1.0).validate()
    with pytest.raises(ConfigError, match="finite"):
        _config(reasoning="grounding", grounding_reward=float("nan")).validate()
    manager = EnvStateManager("bandit", env_groups=1, group_size=1, seed=0)
    with pytest.raises(ConfigError, match="no state checker"):
        run_rollout(OraclePolicy(), manager, _config(reasoning="grounding"), [0])


def test_training_logs_the_three_reasoning_rewards(tiny_model_dir, tmp_path):
    from ragen.cli import main

    run = tmp_path / "run"
    args = short_train_args(
        tiny_model_dir,
        run,
        "rollout.reasoning=grounding_world_modeling",
        "rollout.grounding_reward=0.1",
        max_new_tokens=16,
    )
    assert main(args) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "reward/grounding" in r]
    assert len(train) == 2
    for key in ("reward/grounding", "reward/world_model", "reward/consistency"):
        assert all(0.0 <= r[key] <= 1.0 for r in train)
    assert any("val/reward/grounding" in r for r in rows)
    saved = json.loads(next(run.glob("checkpoints/step_*2/train_config.json")).read_text())
    assert saved["rollout"]["reasoning"] == "grounding_world_modeling"


def test_demo_budget_applies_the_format_to_the_grids_only():
    import argparse

    from ragen.demo import budget_from_args
    from ragen.errors import UsageError
    from ragen.recipes import BUDGETS, rollout_overrides

    args = argparse.Namespace(
        budget="full",
        reasoning="grounding_world_modeling",
        reasoning_reward=["grounding=0.3", "consistency=0.1"],
    )
    b = budget_from_args(args)
    assert b.reasoning_of("sokoban") == "grounding_world_modeling"
    assert b.reasoning_of("bandit") == "free_think"  # no state checker
    assert (
        b.new_tokens("sokoban") == 96 and b.new_tokens("bandit") == BUDGETS["full"].max_new_tokens
    )
    assert b.reasoning_rewards_of("bandit") == {"consistency": 0.1}
    over = rollout_overrides("sokoban", b)
    assert "rollout.reasoning=grounding_world_modeling" in over
    assert "rollout.grounding_reward=0.3" in over and "rollout.max_new_tokens=96" in over
    for bad in (
        dict(reasoning="cot", reasoning_reward=[]),
        dict(reasoning=None, reasoning_reward=["honesty=1"]),
        dict(reasoning=None, reasoning_reward=["grounding=-1"]),
    ):
        with pytest.raises(UsageError):
            budget_from_args(argparse.Namespace(budget="full", **bad))


def test_the_prompt_shows_the_env_reward_not_the_reasoning_reward():
    plain = _oracle_rollout("sokoban", _config(reasoning="grounding"), groups=1)
    paid = _oracle_rollout(
        "sokoban", _config(reasoning="grounding", grounding_reward=0.37), groups=1
    )
    for a, b in zip(plain.trajectories, paid.trajectories):
        assert [t.prompt for t in a.turns] == [t.prompt for t in b.turns]
        assert [t.reward for t in a.turns] != [t.reward for t in b.turns]
