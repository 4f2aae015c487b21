"""Batched multi-turn rollout: seeding, budgets, rewards, end reasons, windows, fuzzing."""

from __future__ import annotations

import random
from dataclasses import asdict

import pytest
from fakes import (
    LineEnv,
    RandomTokenEngine,
    ScriptedEngine,
    check_token_exact,
    index_log,
    tiny_tokenizer,
)

from ragen.agent.env_manager import VAL_SEED_START, EnvStateManager
from ragen.agent.metrics import rollout_metrics
from ragen.agent.policies import ModelPolicy, OraclePolicy, RandomPolicy
from ragen.agent.rollout import RolloutConfig, run_rollout
from ragen.envs.base import make_info
from ragen.errors import UsageError

LINE = LineEnv  # an env factory: nothing is added to the global env list


def _scripted(respond, fmt="chatml"):
    tok = tiny_tokenizer(fmt)
    engine = ScriptedEngine(tok, respond)
    return ModelPolicy(engine, tok), engine


def _config(**kw):
    base = dict(max_new_tokens=48, max_model_len=4096)
    return RolloutConfig(**{**base, **kw})


# -- env manager ---------------------------------------------------------------------
def test_group_members_share_the_seed_but_not_the_dynamics():
    m = EnvStateManager(LINE, {"slip": 0.5}, env_groups=3, group_size=4, seed=7)
    obs = m.reset(m.seeds_for_step(0))
    for g in range(3):
        members = m.envs[g * 4 : (g + 1) * 4]
        assert len({e.seed for e in members}) == 1  # same initial state ...
        assert len(set(obs[g * 4 : (g + 1) * 4])) == 1
        draws = [tuple(e.rng.random() for _ in range(4)) for e in members]
        assert len(set(draws)) == 4  # ... but each member draws its own outcomes
    assert len({e.seed for e in m.envs}) == 3


def test_train_seeds_advance_and_never_meet_validation_seeds():
    m = EnvStateManager(LINE, env_groups=8, group_size=2, seed=3)
    steps = [m.seeds_for_step(s) for s in range(50)]
    flat = [s for seeds in steps for s in seeds]
    assert len(set(flat)) == len(flat)  # fresh seeds every step
    assert all(0 <= s < VAL_SEED_START for s in flat)
    val = m.validation_seeds(5)  # LineEnv(length=6) has 5 distinct validation states
    assert val == m.validation_seeds(5)  # fixed
    with pytest.raises(UsageError, match=r"only 5 distinct validation states.*--group-size"):
        m.validation_seeds(6)
    assert all(s >= VAL_SEED_START for s in val) and not set(val) & set(flat)
    assert m.seeds_for_step(5) == steps[5]  # pure function of the step
    assert EnvStateManager(LINE, env_groups=8, group_size=2, seed=4).seeds_for_step(0) != steps[0]
    # a fresh manager (a resumed run) derives the same seeds: there is no state to save
    assert EnvStateManager(LINE, env_groups=8, group_size=2, seed=3).seeds_for_step(7) == steps[7]
    with pytest.raises(ValueError, match="one seed per group"):
        m.reset([1, 2])


def test_rollout_groups_and_ids():
    policy, _ = _scripted(lambda p, c, r: "<think>x</think><answer>left</answer>")
    m = EnvStateManager(LINE, env_groups=2, group_size=3)
    seeds = m.seeds_for_step(4)
    res = run_rollout(policy, m, _config(max_turns=2), seeds)
    assert [t.group_id for t in res.trajectories] == [0, 0, 0, 1, 1, 1]
    assert [t.episode_id for t in res.trajectories] == list(range(6))
    assert [t.seed for t in res.trajectories] == [seeds[0]] * 3 + [seeds[1]] * 3
    assert all(t.source == "model" and t.env_name == "LineEnv" for t in res.trajectories)


# -- one generation call per turn, finished envs drop out ------------------------------
def test_one_batched_call_per_turn_and_finished_envs_drop_out():
    calls = []

    class CountingEngine(ScriptedEngine):
        def generate(self, prompts, params):
            calls.append(len(prompts))
            return super().generate(prompts, params)

    tok = tiny_tokenizer("chatml")

    def respond(prompt, call, row):  # the oracle direction, parsed from the prompt state
        state = prompt.rsplit("State:\n", 1)[1].split("\n", 1)[0]
        move = "right" if state.index("G") > state.index("P") else "left"
        return f"<think>go {move}</think><answer>{move}</answer>"

    engine = CountingEngine(tok, respond)
    m = EnvStateManager(LINE, {"length": 6}, env_groups=4, group_size=2)
    res = run_rollout(ModelPolicy(engine, tok), m, _config(max_turns=5), m.seeds_for_step(0))
    # every call covers exactly the episodes still running
    alive = [sum(t.num_turns > k for t in res.trajectories) for k in range(len(calls))]
    assert calls == alive and calls == sorted(calls, reverse=True) and calls[0] == 8
    assert all(t.success for t in res.trajectories)
    assert res.stats["generate_calls"] == len(calls)
    assert res.stats["generated_tokens"] == sum(t.num_response_tokens for t in res.trajectories)
    for t in res.trajectories:
        check_token_exact(t, engine.log)
        assert t.context_exact
        assert t.turns[-1].done and t.num_turns == len(t.turn_ends) == len(t.turn_rewards)


# -- budgets and rewards ---------------------------------------------------------------
def test_action_budgets():
    policy, _ = _scripted(
        lambda p, c, r: "<think>x</think><answer>" + " || ".join(["jump"] * 7) + "</answer>"
    )
    m = EnvStateManager(LINE, env_groups=1, group_size=1)
    cfg = _config(max_turns=5, max_actions_per_turn=4, max_actions_per_trajectory=10)
    (t,) = run_rollout(policy, m, cfg, [0]).trajectories
    assert [len(x.actions) for x in t.turns] == [7, 7, 7]
    assert [len(x.executed_actions) for x in t.turns] == [4, 4, 2]  # per turn, then trajectory
    assert t.num_actions == 10 and t.num_turns == 3  # budget spent -> episode over
    assert t.end_reason == "action_budget" and t.turns[-1].done
    assert t.num_valid_actions == 0 and t.num_effective_actions == 0  # "jump" is invalid
    assert "You have 2 actions left (at most 2 this turn)." in t.turns[2].prompt
    assert t.turns[2].prompt.startswith("Turn 3 of 5:\n")


def test_compact_prompts_show_both_budgets():
    policy, _ = _scripted(lambda p, c, r: "<think>x</think><answer>jump || jump</answer>")
    m = EnvStateManager(LINE, env_groups=1, group_size=1)
    cfg = _config(max_turns=4, prompt_style="compact", max_actions_per_trajectory=9)
    (t,) = run_rollout(policy, m, cfg, [0]).trajectories
    assert t.turns[0].prompt.startswith("Turn 1/4, 9 actions left:\n")
    assert t.turns[1].prompt.startswith("Turn 2/4, 7 actions left, last reward 0:\n")


def test_format_penalty_and_reward():
    replies = ["garbage", "<think>a</think><answer>left</answer>", "<answer>left</answer>"]
    policy, _ = _scripted(lambda p, c, r: replies[c])
    m = EnvStateManager(LINE, {"length": 20}, env_groups=1, group_size=1)
    m.reset([11])
    cfg = _config(max_turns=3, format_penalty=-0.25, format_reward=0.5)
    (t,) = run_rollout(policy, m, cfg, [11]).trajectories
    env = m.envs[0]
    assert [x.format_ok for x in t.turns] == [False, True, False]
    assert t.turns[0].executed_actions == [] and t.turns[0].reward == -0.25
    assert t.turns[0].info["format_error"] == "missing <think>"
    assert t.turns[2].executed_actions == []  # think=True: an answer-only reply is malformed
    assert env.log == ["left"] or env.log == []  # only the well-formed turn moved
    assert t.turns[1].reward == pytest.approx(t.turns[1].env_reward + 0.5)
    assert t.turn_rewards == [x.reward for x in t.turns]
    assert t.episode_reward == pytest.approx(sum(t.turn_rewards)) and t.num_format_errors == 2
    assert "Reward of your last turn: -0.25" in t.turns[1].prompt


def test_no_think_mode():
    policy, _ = _scripted(lambda p, c, r: "<answer>left || right</answer>")
    m = EnvStateManager(LINE, {"length": 30}, env_groups=1, group_size=1)
    (t,) = run_rollout(policy, m, _config(max_turns=1, reasoning="no_think"), [3]).trajectories
    assert t.turns[0].format_ok and t.turns[0].executed_actions == ["left", "right"]
    assert "<think>" not in t.turns[0].prompt


class _RejectingEnv(LineEnv):
    """Raises on one action (envs must not, but the rollout must survive it)."""

    def _step(self, action):
        if action == "explode":
            raise AttributeError("'int' object has no attribute 'strip'")
        if action == "noop":
            return self.render(), 0.0, False, False, make_info(True, False, False)
        return super()._step(action)


def test_an_env_exception_ends_the_episode_as_truncated_never_the_run(caplog):
    """Any exception type: the episode ends (env_truncated, the reason recorded and
    logged); more failed episodes than rollout.max_env_error_share stop the run."""
    from ragen.errors import EnvUnavailableError

    policy, _ = _scripted(lambda p, c, r: "<think>x</think><answer>noop || explode</answer>")
    m = EnvStateManager(_RejectingEnv, {"length": 30}, env_groups=1, group_size=1)
    with caplog.at_level("WARNING", logger="ragen.envs"):
        (t,) = run_rollout(
            policy, m, _config(max_turns=2, max_env_error_share=1.0), [5]
        ).trajectories
    assert t.end_reason == "env_truncated" and t.num_turns == 1 and t.num_actions == 2
    assert t.turns[0].info["action_is_valid"] == [True, False]
    assert t.env_error == "AttributeError: 'int' object has no attribute 'strip'"
    assert "the episode ends truncated" in caplog.text
    with pytest.raises(EnvUnavailableError, match=r"1 of 1 episodes .* AttributeError"):
        run_rollout(policy, m, _config(max_turns=2), [5])


# -- end reasons ------------------------------------------------------------------------
def test_context_overflow_at_max_model_len():
    policy, engine = _scripted(
        lambda p, c, r: "<think>" + "go " * 20 + "</think><answer>jump</answer>"
    )
    m = EnvStateManager(LINE, env_groups=1, group_size=2)
    probe = run_rollout(policy, m, _config(max_turns=1), [1]).trajectories[0]
    first_prompt = len(probe.input_ids) - probe.num_response_tokens
    # room for turn 0 but not for turn 1's longer prompt
    cfg = _config(max_turns=5, max_new_tokens=48, max_model_len=first_prompt + 60)
    res = run_rollout(policy, m, cfg, [1])
    for t in res.trajectories:
        assert t.end_reason == "context_overflow" and t.num_turns == 1 and t.turns[-1].done
        assert t.continues_after_end(budget_is_terminal=True)
        assert len(t.input_ids) + 0 <= cfg.max_model_len
        assert t.input_ids[-1] == t.input_ids[t.turn_ends[-1]]  # ends on the last sampled id
        check_token_exact(t, engine.log)
    assert res.stats["context_overflow_episodes"] == 2
    metrics = rollout_metrics(res.trajectories)
    assert metrics["truncation_rate"] == 1.0 and metrics["env_truncation_rate"] == 0.0
    # a first prompt that does not fit: zero turns, no crash
    cfg = _config(max_new_tokens=48, max_model_len=first_prompt + 10)
    (t, _) = run_rollout(policy, m, cfg, [1]).trajectories
    assert t.end_reason == "context_overflow" and t.num_turns == 0
    assert t.input_ids == [] and t.turn_ends == []


def test_turn_limit_and_terminated():
    """Invalid moves never reach the goal: ``turn_limit``; the oracle reaches it:
    ``terminated`` (also when its last turn is the last allowed)."""
    policy, _ = _scripted(lambda p, c, r: "<think>x</think><answer>jump</answer>")
    m = EnvStateManager(LINE, {"length": 30}, env_groups=1, group_size=1)
    (t,) = run_rollout(policy, m, _config(max_turns=2), [5]).trajectories
    assert t.num_turns == 2 and not t.success and t.end_reason == "turn_limit"
    assert t.turns[-1].done
    m.reset([5])
    distance = abs(m.envs[0].goal - m.envs[0].pos)
    cfg = _config(max_turns=distance, max_actions_per_trajectory=distance + 1)
    (t,) = run_rollout(OraclePolicy(), m, cfg, [5]).trajectories
    assert t.success and t.num_turns == distance and t.end_reason == "terminated"


class _HiddenLimitLine(LineEnv):
    """Truncates after ``limit`` moves; the observation does not show the count."""

    def __init__(self, limit: int = 2, **kw) -> None:
        super().__init__(**kw)
        self.limit = limit

    def _step(self, action):
        obs, reward, terminated, _, info = super()._step(action)
        truncated = not terminated and len(self.log) >= self.limit
        return obs, reward, terminated, truncated, info


def test_env_truncation_is_recorded_and_ends_the_turn():
    policy, _ = _scripted(lambda p, c, r: "<think>x</think><answer>left || left || left</answer>")
    m = EnvStateManager(_HiddenLimitLine, {"length": 30}, env_groups=1, group_size=2)
    res = run_rollout(policy, m, _config(max_turns=5), [5])
    for t in res.trajectories:
        assert t.end_reason == "env_truncated" and t.num_turns == 1
        assert t.turns[0].executed_actions == ["left", "left"]  # the cut stops the turn
        assert t.continues_after_end(budget_is_terminal=True)
    assert rollout_metrics(res.trajectories)["env_truncation_rate"] == 1.0


def test_gymnasium_time_limit_reaches_the_trajectory_as_env_truncated():
    gym = pytest.importorskip("gymnasium")
    from ragen.envs.adapters.gymnasium_env import GymEnv

    def lake():
        return GymEnv(
            lambda: gym.make(
                "FrozenLake-v1", render_mode="ansi", is_slippery=False, max_episode_steps=3
            ),
            action_names=["left", "down", "right", "up"],
        )

    policy, _ = _scripted(lambda p, c, r: "<think>x</think><answer>left || up</answer>")
    m = EnvStateManager(lake, env_groups=1, group_size=1)
    (t,) = run_rollout(policy, m, _config(max_turns=5), [0]).trajectories
    assert t.num_actions == 3 and t.num_turns == 2 and t.end_reason == "env_truncated"


class _OldContractLine(LineEnv):
    def _step(self, action):
        obs, reward, terminated, _, info = super()._step(action)
        return obs, reward, terminated, info


def test_an_env_on_the_old_contract_fails_loudly():
    """The old 4-tuple is a bug to fix, never silently an invalid action."""
    policy, _ = _scripted(lambda p, c, r: "<think>x</think><answer>left</answer>")
    m = EnvStateManager(_OldContractLine, env_groups=1, group_size=1)
    with pytest.raises(TypeError, match="old 4-tuple"):
        run_rollout(policy, m, _config(max_turns=2), [0])


# -- windowed context -------------------------------------------------------------------
def test_window_rollout_makes_one_sample_per_turn():
    policy, engine = _scripted(lambda p, c, r: f"<think>turn {c}</think><answer>jump</answer>")
    m = EnvStateManager(LINE, env_groups=1, group_size=2)
    res = run_rollout(policy, m, _config(max_turns=3, context_window=1), [2])
    assert len(res.trajectories) == 6
    by_episode = {}
    for t in res.trajectories:
        by_episode.setdefault(t.episode_id, []).append(t)
        check_token_exact(t, engine.log)
        assert len(t.turn_ends) == 1 and len(t.turn_rewards) == 1
        assert t.num_turns == 3 and len(t.turns) == 3
    for samples in by_episode.values():
        assert [s.turn_index for s in samples] == [0, 1, 2]
        # 'jump' is invalid: the episode runs into the turn limit; only the sample of
        # the last turn ends there, the others' reward-to-go is Monte-Carlo
        assert {s.end_reason for s in samples} == {"turn_limit"}
        assert [s.continues_after_end(False) for s in samples] == [False, False, True]
        assert not any(s.continues_after_end(True) for s in samples)
        assert [s.turn_rewards[0] for s in samples] == [x.reward for x in samples[0].turns]
        # turn 2's prompt shows turn 1 but not turn 0
        text = engine.tokenizer.decode(samples[2].input_ids)
        assert "turn 1" in text and "<think>turn 0</think>" not in text
    metrics = rollout_metrics(res.trajectories, 2)
    assert metrics["episodes"] == 2 and metrics["mean_turns"] == 3


def test_window_samples_are_credited_with_their_reward_to_go():
    policy, _ = _scripted(lambda p, c, r: "<think>go</think><answer>left</answer>")
    m = EnvStateManager(LINE, env_groups=2, group_size=1)
    res = run_rollout(policy, m, _config(max_turns=4, context_window=0), [0, 1])
    by_episode = {}
    for t in res.trajectories:
        by_episode.setdefault(t.episode_id, []).append(t)
    credits = []
    for samples in by_episode.values():
        paid = [x.reward for x in samples[0].turns]
        # turn k is credited with what the episode earned from turn k on
        expect = [sum(paid[k:]) for k in range(len(paid))]
        assert [s.reward_to_go for s in samples] == pytest.approx(expect)
        assert samples[0].reward_to_go == pytest.approx(samples[0].episode_reward)
        credits += expect
    assert len(set(round(c, 6) for c in credits)) > 2  # the check above is not vacuous


# -- reference policies -----------------------------------------------------------------
def test_oracle_solves_and_its_samples_are_token_exact():
    tok = tiny_tokenizer("chatml")
    m = EnvStateManager(LINE, {"length": 8}, env_groups=4, group_size=1)
    cfg = _config(max_turns=8, max_actions_per_trajectory=20)
    res = run_rollout(OraclePolicy(tokenizer=tok), m, cfg, m.validation_seeds())
    for t in res.trajectories:
        assert t.success and t.num_format_errors == 0 and t.source == "oracle"
        assert t.end_reason == "terminated" and not t.continues_after_end(False)
        assert t.context_exact and t.num_response_tokens > 0
        for turn, end in zip(t.turns, t.turn_ends):  # the response ids decode to its text
            assert (
                tok.decode(t.input_ids[end - turn.info["num_tokens"] + 1 : end + 1])
                == turn.response
            )
    # several actions per turn: planned on a copy, the real env is untouched until executed
    multi = run_rollout(OraclePolicy(actions_per_turn=5), m, cfg, m.validation_seeds())
    assert all(t.success and t.num_turns == 1 for t in multi.trajectories)


def test_oracle_epsilon_and_random_policy_are_seeded():
    m = EnvStateManager(LINE, {"length": 12}, env_groups=8, group_size=2)
    cfg = _config(max_turns=6)

    def actions(policy):
        res = run_rollout(policy, m, cfg, m.validation_seeds())
        return [[a for x in t.turns for a in x.executed_actions] for t in res.trajectories]

    greedy = actions(OraclePolicy())
    noisy = actions(OraclePolicy(epsilon=0.5, seed=1))
    assert noisy != greedy and noisy == actions(OraclePolicy(epsilon=0.5, seed=1))
    rnd = actions(RandomPolicy(actions_per_turn=2, seed=0))
    assert rnd == actions(RandomPolicy(actions_per_turn=2, seed=0))
    assert rnd != actions(RandomPolicy(actions_per_turn=2, seed=1))
    assert all(len(x) % 2 == 0 or len(x) < 12 for x in rnd)
    with pytest.raises(ValueError, match="epsilon"):
        OraclePolicy(epsilon=2.0)


# -- fuzz ---------------------------------------------------------------------------------
_JUNK = ["<think>", "</think>", "<answer>", "</answer>", "||", "left", "right", "jump", " ",
         "\n", "ü", "🙂", "<|im_end|>", "<|im_start|>", "中", "\x00", "LEFT", "</", "answer>"]  # fmt: skip


def _check_sample_invariants(t):
    n = len(t.input_ids)
    assert len(t.response_mask) == len(t.gen_logprobs) == n
    assert all(t.response_mask[i] == 1 for i in t.turn_ends)
    assert len(t.turn_ends) == len(t.turn_rewards)
    assert t.turn_ends == sorted(t.turn_ends)


@pytest.mark.parametrize("fmt", ["chatml", "llama3"])
def test_fuzz_rollout_with_random_text(fmt):
    rng = random.Random(0)

    def respond(prompt, call, row):
        text = "".join(rng.choice(_JUNK) for _ in range(rng.randint(0, 14)))
        return text + ("<eos>" if rng.random() < 0.3 else "")

    policy, engine = _scripted(respond, fmt)
    m = EnvStateManager(LINE, {"slip": 0.2}, env_groups=25, group_size=4)
    for step in range(2):  # 100 episodes x up to 5 turns x 2 steps: ~1000 random responses
        for window in (None, 1):
            res = run_rollout(
                policy, m, _config(max_new_tokens=40, context_window=window), m.seeds_for_step(step)
            )
            log = index_log(engine.log)
            for t in res.trajectories:
                _check_sample_invariants(t)
                check_token_exact(t, log)
            metrics = rollout_metrics(res.trajectories, 4)
            assert 0.0 <= metrics["format_error_rate"] <= 1.0


@pytest.mark.parametrize("window", [None, 2])
def test_fuzz_rollout_with_random_token_ids(window):
    tok = tiny_tokenizer("chatml")
    engine = RandomTokenEngine(len(tok), tok.eos_token_id, seed=1, tokenizer=tok)
    m = EnvStateManager(LINE, env_groups=16, group_size=4)
    res = run_rollout(
        ModelPolicy(engine, tok),
        m,
        _config(max_new_tokens=30, max_model_len=600, context_window=window),
        m.seeds_for_step(0),
    )
    log = index_log(engine.log)
    for t in res.trajectories:
        _check_sample_invariants(t)
        check_token_exact(t, log)
        assert len(t.input_ids) <= 600
    assert rollout_metrics(res.trajectories)["episodes"] == 64


def test_config_validation_and_serialization():
    with pytest.raises(ValueError, match="max_new_tokens"):
        RolloutConfig(max_new_tokens=100, max_model_len=50).validate()
    with pytest.raises(ValueError, match="max_turns"):
        RolloutConfig(max_turns=0).validate()
    with pytest.raises(KeyError, match="unknown rollout config"):
        RolloutConfig.from_dict({"max_turn": 3})
    cfg = RolloutConfig(context_window=2)
    assert RolloutConfig.from_dict(asdict(cfg)) == cfg


class _OneShotLine(LineEnv):
    single_turn = True


def test_single_turn_env_ends_after_one_response_even_if_malformed():
    policy, _ = _scripted(lambda p, c, r: "no format")
    m = EnvStateManager(_OneShotLine, env_groups=1, group_size=2)
    res = run_rollout(policy, m, _config(max_turns=5), [0])
    assert all(t.num_turns == 1 and t.num_format_errors == 1 for t in res.trajectories)
    assert all(t.end_reason == "terminated" for t in res.trajectories)


def test_chat_policy_is_text_only_and_windowed():
    from ragen.agent.policies import ChatPolicy

    seen = []

    class FakeChat:
        def chat(self, conversations, params):
            seen.extend(conversations)
            assert params.stop_strings == ["</answer>"]
            return ["<think>t</think><answer>jump</answer>"] * len(conversations)

    m = EnvStateManager(LINE, env_groups=1, group_size=1)
    res = run_rollout(ChatPolicy(FakeChat()), m, _config(max_turns=3, context_window=1), [0])
    (t,) = res.trajectories
    assert t.input_ids == [] and t.turn_ends == [] and len(t.turn_rewards) == 3
    assert t.source == "chat" and res.stats["generated_tokens"] == 0
    roles = [[msg["role"] for msg in conv] for conv in seen]
    assert roles == [
        ["system", "user"],
        ["system", "user", "assistant", "user"],
        ["system", "user", "assistant", "user"],  # window 1: only the previous turn
    ]
    assert seen[2][1]["content"].startswith("Turn 2 of 3:")
    assert seen[2][3]["content"].startswith("Turn 3 of 3:")
    assert rollout_metrics(res.trajectories)["mean_turns"] == 3


@pytest.mark.parametrize("which", ["hand", "think_dropping"])
def test_rollout_with_custom_templates(which):
    import copy

    from fakes import HAND_TEMPLATE, THINK_DROPPING_TEMPLATE

    tok = copy.deepcopy(tiny_tokenizer("chatml"))
    tok.chat_template = HAND_TEMPLATE if which == "hand" else THINK_DROPPING_TEMPLATE
    engine = ScriptedEngine(tok, lambda p, c, r: f"<think>step {c}</think><answer>jump</answer>")
    m = EnvStateManager(LINE, env_groups=2, group_size=2)
    res = run_rollout(ModelPolicy(engine, tok), m, _config(max_turns=3), m.seeds_for_step(0))
    for t in res.trajectories:
        check_token_exact(t, engine.log)
        assert t.num_turns == 3
        assert t.context_exact == (which == "hand")
        text = tok.decode(t.input_ids)
        assert "<think>step 0</think>" in text  # the history keeps every sampled think block
