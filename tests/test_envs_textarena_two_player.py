"""Two-player TextArena games against a fixed opponent: the contract, the solvers, the
opponents (random, scripted, a frozen checkpoint), the outcome rewards, training."""

from __future__ import annotations

import json
import random
import sys

import pytest
from fakes import short_train_args

from ragen.cli import main
from ragen.envs import make
from ragen.errors import MissingDependencyError

GAMES = ["ta_tictactoe", "ta_connect_four", "ta_nim"]
NEEDS = "needs textarena: pip install 'ragen[textarena]' (make test has it)"


def _play(env, policy: str, seed: int) -> str:
    """The outcome of one game of ``policy`` (oracle | random) from ``seed``."""
    return _game(env, policy, seed)["outcome"]


def _game(env, policy: str, seed: int) -> dict:
    """The last step's info of one game."""
    env.reset(seed, rng_seed=seed + 1000)
    rng = random.Random(seed)
    while not env.done:
        action = env.oracle_action() if policy == "oracle" else env.random_action(rng)
        *_, info = env.step(action)
    return info


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "textarena", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'ragen\[textarena\]'"):
        make("ta_nim")


@pytest.mark.parametrize("opponent", ["random", "heuristic"])
@pytest.mark.parametrize("name", GAMES)
def test_check_env(name, opponent):
    pytest.importorskip("textarena", reason=NEEDS)
    from ragen.envs.checker import check_env

    check_env(make(name, opponent=opponent), seeds=(0, 1, 2))


def test_the_solvers_against_both_opponents():
    pytest.importorskip("textarena", reason=NEEDS)
    for opponent in ("random", "heuristic"):
        # perfect play: Tic Tac Toe is never lost, Nim is won from the first move
        ttt = make("ta_tictactoe", opponent=opponent)
        assert "loss" not in {_play(ttt, "oracle", s) for s in range(12)}
        nim = make("ta_nim", opponent=opponent, side="first")
        assert {_play(nim, "oracle", s) for s in range(8)} == {"win"}
    c4 = make("ta_connect_four", opponent="random")
    assert [_play(c4, "oracle", s) for s in range(4)].count("win") == 4
    # and a random player is beaten by the scripted opponent far more often than not
    ttt = make("ta_tictactoe", opponent="heuristic")
    assert [_play(ttt, "random", s) for s in range(12)].count("loss") >= 8


def test_sides_moves_and_the_opponents_reply_in_one_step():
    pytest.importorskip("textarena", reason=NEEDS)
    env = make("ta_tictactoe", side="second")
    obs = env.reset(3)
    assert "You are Player 1" in obs and "'X'" in obs  # the side is in the first observation
    assert "placed their symbol (O)" in obs  # the opponent opened
    taken = next(c for c in "012345678" if c not in env.spec.legal(env._core))
    before = env.snapshot()
    obs, reward, terminated, _, info = env.step(taken)  # an occupied cell: nothing happens
    assert info["action_is_valid"] and not info["action_is_effective"] and not terminated
    assert "already taken" in obs and env.snapshot()[1:] == before[1:]
    _, _, _, _, info = env.step("the middle one")  # not a move of the game
    assert not info["action_is_valid"]
    moves_before = sum(c != "" for row in env._core.state.game_state["board"] for c in row)
    env.step(env.oracle_action())
    moves_after = sum(c != "" for row in env._core.state.game_state["board"] for c in row)
    assert moves_after == moves_before + 2  # the agent's move and the opponent's reply
    nim = make("ta_nim")
    sides = {(nim.reset(s), nim.agent_id)[1] for s in range(8)}
    assert sides == {0, 1}  # side="either": the seed decides
    assert f"Welcome to Nim, Player {nim.agent_id}!" in nim.render()


def test_outcome_and_win_only_rewards():
    pytest.importorskip("textarena", reason=NEEDS)
    for reward_mode, loss_reward in (("outcome", -1.0), ("win", 0.0)):
        env = make("ta_nim", opponent="heuristic", side="second", reward=reward_mode)
        env.reset(0)
        total = 0.0
        while not env.done:  # hand the heuristic the win: take one object at a time
            legal = env._core.state.game_state["piles"]
            pile = max(range(len(legal)), key=lambda p: legal[p])
            _, reward, _, _, info = env.step(f"{pile} 1")
            total += reward
        assert info["outcome"] == "loss" and total == loss_reward and not info["success"]
    win = make("ta_nim", opponent="random", side="first", reward="win")
    assert _play(win, "oracle", 0) == "win" and win.success


def test_opponent_choices_follow_the_dynamics_seed_and_global_random_is_untouched():
    pytest.importorskip("textarena", reason=NEEDS)
    env = make("ta_connect_four", opponent="random", side="first")
    replies = set()
    for rng_seed in range(6):
        replies.add(env.reset(0, rng_seed=rng_seed) + env.step("3")[0])
    assert len(replies) > 1  # group members (same seed) meet different random replies
    assert (
        env.reset(0, rng_seed=2) + env.step("3")[0] == env.reset(0, rng_seed=2) + env.step("3")[0]
    )
    random.seed(5)
    expected = [random.random() for _ in range(3)]
    random.seed(5)
    first = random.random()
    _play(make("ta_tictactoe", opponent="random"), "random", 4)
    assert [first, random.random(), random.random()] == expected


def test_a_frozen_checkpoint_as_the_opponent(tiny_model_dir):
    pytest.importorskip("textarena", reason=NEEDS)
    env = make("ta_tictactoe", opponent="checkpoint", opponent_model=tiny_model_dir)
    info = _game(env, "oracle", 1)
    assert info["outcome"] in ("win", "draw")  # the solver never loses
    # an untrained model does not write legal moves: each miss became a random legal one
    assert info["opponent_fallbacks"] >= 1
    from ragen.errors import EnvConfigError

    with pytest.raises(EnvConfigError, match="opponent_model=PATH"):
        make("ta_tictactoe", opponent="checkpoint")


def test_train_two_steps(tiny_model_dir, tmp_path):
    pytest.importorskip("textarena", reason=NEEDS)
    from ragen.cli import main

    run = tmp_path / "run"
    args = [a for a in short_train_args(tiny_model_dir, run) if a != "env=sokoban"]
    assert main([*args, "env=ta_tictactoe", "rollout.max_actions_per_turn=1"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "val/success_rate" in rows[-1]


def test_eval_reports_wins_draws_and_losses(tmp_path, capsys):
    """A two-player game's evaluation splits the games into wins, draws and losses (and
    unfinished ones) on the console, in metrics.json and in results.md."""
    pytest.importorskip("textarena", reason=NEEDS)
    out = tmp_path / "eval"
    argv = ["eval", "--model", "random", "--env", "ta_tictactoe", "--n", "24", "--out", str(out)]
    assert main([*argv, "--env-config", "opponent=random"]) == 0
    printed = capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text())["metrics"]
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    outcomes = [r["turns"][-1]["info"].get("outcome") for r in records]
    for kind in ("win", "draw", "loss"):
        assert metrics[f"{kind}_rate"] == outcomes.count(kind) / 24
    assert metrics["win_rate"] == metrics["success_rate"]
    unfinished = sum(o is None for o in outcomes) / 24
    assert metrics["unfinished_rate"] == unfinished
    assert sum(metrics[f"{k}_rate"] for k in ("win", "draw", "loss", "unfinished")) == 1
    assert len(set(outcomes) - {None}) >= 2  # a random player against a random one
    split = " / ".join(f"{metrics[f'{k}_rate']:.1%}" for k in ("win", "draw", "loss"))
    assert "wins / draws / losses" in printed and split in printed
    assert f"| wins / draws / losses | {split} |" in (out / "results.md").read_text()


def test_one_player_games_have_no_win_draw_loss_rows(capsys):
    assert main(["eval", "--model", "oracle", "--env", "sokoban", "--n", "2"]) == 0
    assert "wins / draws / losses" not in capsys.readouterr().out
