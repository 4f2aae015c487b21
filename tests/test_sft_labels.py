"""SFT targets are the solver's moves: noisy or learner rollouts pick the states visited,
never the labels (DAgger's data), and the warm start's fit is measured on a held-out slice."""

import dataclasses
import math
import random

import pytest
import torch

import ragen.envs as envs
from ragen.agent.policies import OraclePolicy, RandomPolicy, RelabeledPolicy
from ragen.agent.rollout import RolloutConfig
from ragen.agent.trajectory import Trajectory
from ragen.errors import ConfigError
from ragen.sft.config import SFTConfig
from ragen.sft.expert_data import make_expert_data
from ragen.sft.trainer import sft_lr_factor, train_sft
from tests.fakes import tiny_tokenizer

WINDOWED = RolloutConfig(max_turns=10, max_actions_per_turn=1, context_window=0)


def _replay_labels(sample: Trajectory, env_name: str) -> tuple[list[str], list[str]]:
    """Replay the episode of ``sample`` move by move; return (the solver's move in each
    state, the recorded reply's move) for every turn."""
    env = envs.make(env_name)
    env.reset(sample.seed)
    expert, labelled = [], []
    for turn in sample.turns:
        expert.append(env.oracle_action())
        labelled.append(turn.actions[0])
        for action in turn.executed_actions:
            env.step(action)
    return expert, labelled


@pytest.mark.parametrize("env_name", ["sokoban", "frozen_lake"])
def test_every_target_is_the_solvers_move_in_the_visited_state(env_name):
    cfg = SFTConfig(env=env_name, episodes=24, epsilon=0.3, rollout=WINDOWED, seed=3)
    data = make_expert_data(tiny_tokenizer(), cfg)
    episodes = {t.episode_id: t for t in data}
    played_off_expert = 0
    for sample in episodes.values():
        if env_name == "frozen_lake":  # slippery: a replay needs the env's own RNG draws
            break
        expert, labelled = _replay_labels(sample, env_name)
        kept = {t.turn_index for t in data if t.episode_id == sample.episode_id}
        for k in kept:
            assert labelled[k] == expert[k]
        played_off_expert += sum(turn.executed_actions != turn.actions for turn in sample.turns)
    for t in data:  # the trained reply is the recorded label of its own turn
        turn = t.turns[t.turn_index]
        assert turn.info.get("expert_label", True)
        assert turn.response.endswith(f"<answer>{turn.actions[0]}</answer>")
    if env_name == "sokoban":
        assert played_off_expert > 0  # the noise moved the episodes, not the labels


def test_played_labels_keep_the_noisy_move_as_target():
    """labels=played is the old data: the random moves are trained on (the bandit's
    format-only warm start needs exactly that)."""
    rollout = RolloutConfig(max_turns=10, max_actions_per_turn=1)
    cfg = SFTConfig(env="sokoban", episodes=16, epsilon=0.5, labels="played", rollout=rollout)
    data = make_expert_data(tiny_tokenizer(), cfg)
    turns = [turn for t in data for turn in t.turns]
    assert all(turn.executed_actions == turn.actions for turn in turns)
    env = envs.make("sokoban")
    off = 0
    for t in data:
        env.reset(t.seed)
        for turn in t.turns:
            off += turn.actions[0] != env.oracle_action()
            for a in turn.executed_actions:
                env.step(a)
    assert off > 0


def test_expert_labels_with_noise_need_the_windowed_context():
    cfg = SFTConfig(env="sokoban", episodes=4, epsilon=0.1, rollout=RolloutConfig())
    with pytest.raises(ConfigError, match="context_window=0"):
        cfg.validate()
    with pytest.raises(ConfigError, match="labels="):
        SFTConfig(labels="random", rollout=WINDOWED).validate()


def test_a_behavior_policy_visits_and_the_oracle_labels():
    """DAgger: the behavior (here uniformly random) picks every move that runs."""
    tok = tiny_tokenizer()
    cfg = SFTConfig(env="sokoban", episodes=8, rollout=WINDOWED, seed=1)
    data = make_expert_data(tok, cfg, behavior=RandomPolicy(seed=5))
    assert data
    for t in data:
        turn = t.turns[t.turn_index]
        assert turn.info["expert_label"] is True
    policy = RelabeledPolicy(OraclePolicy(tokenizer=tok), RandomPolicy(seed=5))
    assert policy.tokenizer is tok


def test_unanswerable_states_are_dropped():
    """A state the solver cannot answer gets a random reply from the oracle; such turns
    are never SFT targets."""
    from ragen.agent.policies import TurnRequest
    from ragen.engines.base import SamplingParams

    class NoAnswer:
        def oracle_action(self):
            return None

        def random_action(self, rng: random.Random) -> str:
            return "up"

    (out,) = OraclePolicy().act(
        [TurnRequest(env=NoAnswer(), messages=[], reasoning="no_think")], SamplingParams()
    )
    assert out.info["expert_label"] is False


def test_lr_schedule_warms_up_then_decays_to_a_tenth():
    total = 100
    factors = [sft_lr_factor(s, total, warmup=0.1) for s in range(total + 1)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert max(factors) == pytest.approx(1.0)
    assert factors[-1] == pytest.approx(0.1)
    assert all(a >= b - 1e-12 for a, b in zip(factors[10:], factors[11:]))
    assert sft_lr_factor(0, total) == pytest.approx(1.0)  # no warm-up: the old schedule


def test_fit_is_measured_on_a_heldout_slice(tiny_model_dir):
    from ragen.models import load_policy

    model, tok = load_policy(tiny_model_dir, device="cpu", dtype=torch.float32)
    cfg = SFTConfig(
        env="sokoban", episodes=8, heldout_episodes=4, rollout=WINDOWED, epochs=2, batch_size=8
    )
    data = make_expert_data(tok, cfg)
    heldout = make_expert_data(tok, cfg, "heldout")
    assert {t.seed for t in data}.isdisjoint({t.seed for t in heldout})
    epochs = []
    history = train_sft(
        model,
        tok,
        data,
        cfg,
        log=lambda m: None,
        heldout=heldout,
        on_epoch=lambda m, t, e: epochs.append(e) or {"probe": float(e)},
    )
    ends = [r for r in history if "heldout_loss" in r]
    assert [r["epoch"] for r in ends] == [0, 1] and epochs == [0, 1]
    for r in ends:
        assert r["probe"] == r["epoch"]
        for k in ("heldout", "train"):
            assert r[f"{k}_loss"] > 0
            assert 0.0 <= r[f"{k}_reply_accuracy"] <= 1.0
            assert 0.0 <= r[f"{k}_token_accuracy"] <= 1.0
    assert ends[-1]["train_loss"] < ends[0]["train_loss"]  # it learns what it is taught


def test_a_time_budget_shortens_the_schedule_so_it_still_decays(tiny_model_dir, monkeypatch):
    import itertools

    import ragen.sft.trainer as sft
    from ragen.models import load_policy

    model, tok = load_policy(tiny_model_dir, device="cpu", dtype=torch.float32)
    cfg = SFTConfig(env="frozen_lake", episodes=8, rollout=WINDOWED, epochs=30, batch_size=2,
                    max_seconds=0.4, lr=1e-3)  # fmt: skip
    data = make_expert_data(tok, cfg)
    total = math.ceil(len(data) / cfg.batch_size) * cfg.epochs
    clock = itertools.count(0.0, 0.01)  # a fake clock: 10 ms per reading, about one per step
    monkeypatch.setattr(sft, "_clock", lambda: next(clock))
    history = train_sft(model, tok, data, cfg, log=lambda m: None)
    assert sft.BUDGET_PROBE_STEPS < len(history) < total  # stopped at what fits ...
    assert history[-1]["lr"] == pytest.approx(1e-4)  # ... with the decay run to 10% of peak


def test_a_model_stuck_at_the_fit_check_is_drawn_again(tiny_model_dir, tmp_path):
    """A from-scratch model that fails the fit check restarts from a new init (at most
    fit_restarts times, then trains on); the restarts are recorded. A few steps never
    fit every reply, so every check fails here."""
    import json

    from ragen.sft.trainer import run_sft

    cfg = SFTConfig(env="frozen_lake", episodes=6, rollout=WINDOWED, epochs=2, batch_size=8,
                    lr=1e-3, fit_check=0.5, fit_min_reply_accuracy=1.0, fit_restarts=2)  # fmt: skip
    lines = []
    out = run_sft(tiny_model_dir, tmp_path / "sft", cfg, log=lines.append)
    history = [json.loads(x) for x in (out / "sft_metrics.jsonl").read_text().splitlines()]
    restarts = history[0]["restarts"]
    assert [r["next_init_seed"] for r in restarts] == [1000, 2000]
    assert all(0 <= r["reply_accuracy"] < 1.0 and r["step"] >= 1 for r in restarts)
    assert sum("restart" in x for x in lines) == 2
    assert any("fit check failed" in x and "training on" in x for x in lines)  # the last try
    assert history[-1]["step"] == len(history)  # the last try ran its whole schedule
    with pytest.raises(ConfigError, match="fit_check"):
        SFTConfig(fit_check=1.5).validate()


def test_a_run_still_on_the_plateau_at_the_end_trains_extra_epochs(tiny_model_dir, tmp_path):
    """end_fit_min_reply_accuracy: when the training slice's reply accuracy after the last
    epoch is below it, end_fit_extra_epochs more epochs run, each on a fresh one-epoch
    schedule, their records continuing the run's steps and epochs; a run at or above the
    floor (or stopped at its success target) is left as it is."""
    import json

    from ragen.sft.trainer import _extra_epochs_if_unfit, run_sft

    def history_of(cfg, name):
        lines = []
        out = run_sft(tiny_model_dir, tmp_path / name, cfg, log=lines.append)
        rows = [json.loads(x) for x in (out / "sft_metrics.jsonl").read_text().splitlines()]
        return rows, lines

    base = SFTConfig(env="frozen_lake", episodes=6, heldout_episodes=2, rollout=WINDOWED,
                     epochs=1, batch_size=8, lr=1e-3)  # fmt: skip
    plain, _ = history_of(base, "plain")
    per_epoch = len(plain)
    # a floor no few-step run reaches: the extra epochs run
    stuck_cfg = dataclasses.replace(base, end_fit_min_reply_accuracy=1.0, end_fit_extra_epochs=2)
    stuck, lines = history_of(stuck_cfg, "stuck")
    assert len(stuck) == 3 * per_epoch
    started = stuck[0].pop("extra_epochs")
    assert started["after_step"] == per_epoch and started["epochs"] == 2
    assert started["train_reply_accuracy"] == plain[-1]["train_reply_accuracy"]
    same = ("step", "epoch", "loss", "grad_norm", "lr")  # the scheduled epoch is the plain run's
    assert [{k: r[k] for k in same} for r in stuck[:per_epoch]] == [
        {k: r[k] for k in same} for r in plain
    ]
    assert [r["step"] for r in stuck] == list(range(1, 3 * per_epoch + 1))
    assert [r.get("extra_epoch", 0) for r in stuck[::per_epoch]] == [0, 1, 2]
    assert [r["epoch"] for r in stuck[::per_epoch]] == [0, 1, 2]
    assert all("train_reply_accuracy" in stuck[i * per_epoch - 1] for i in (1, 2, 3))
    assert stuck[per_epoch]["lr"] == stuck[0]["lr"]  # each extra epoch: a fresh schedule
    assert sum("more epoch(s)" in x for x in lines) == 1
    # at or above the floor, or stopped at its success target: nothing trains
    floor = dataclasses.replace(base, end_fit_min_reply_accuracy=0.5)
    for ended in (
        {"train_reply_accuracy": 0.5},
        {"train_reply_accuracy": 0.1, "stopped_at_success": 0.4},
    ):
        history = [{"step": 3, "epoch": 0, "elapsed_s": 1.0, **ended}]
        assert _extra_epochs_if_unfit(None, None, [], floor, history, log=print) is history
    with pytest.raises(ConfigError, match="heldout_episodes > 0"):
        SFTConfig(end_fit_min_reply_accuracy=0.4).validate()
    # the auxiliary data of a run with a floor have no held-out slice and no floor
    from ragen.sft.expert_data import auxiliary_config

    aux = dataclasses.replace(floor, aux_reasoning="grounding", aux_episodes=4)
    auxiliary_config(aux).validate()
    with pytest.raises(ConfigError, match="end_fit_extra_epochs"):
        SFTConfig(end_fit_extra_epochs=-1).validate()
