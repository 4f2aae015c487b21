"""2048: the slide/merge rule, spawns from the dynamics RNG, the expectimax oracle."""

from __future__ import annotations

import random

import pytest

from ragen.envs import make
from ragen.envs.checker import check_env
from ragen.envs.games.game2048 import apply_move, can_move, slide_row


@pytest.mark.parametrize(
    "row, out, score",
    [
        ((1, 1, 0, 0), (2, 0, 0, 0), 4),  # 2 2 -> 4
        ((1, 1, 1, 1), (2, 2, 0, 0), 8),  # each tile merges once
        ((2, 1, 1, 0), (2, 2, 0, 0), 4),  # 4 2 2 -> 4 4, not 8
        ((0, 3, 0, 3), (4, 0, 0, 0), 16),
        ((1, 2, 3, 4), (1, 2, 3, 4), 0),
        ((1, 1, 2, 0), (2, 2, 0, 0), 4),  # the merged 4 does not merge again
    ],
)
def test_slide_row(row, out, score):
    assert slide_row(row) == (out, score)


def test_moves_in_every_direction_and_game_over():
    board = (1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 2)
    assert apply_move(board, 4, "left")[0][:4] == (2, 0, 0, 0)
    assert apply_move(board, 4, "right")[0][12:] == (0, 0, 0, 3)
    up, _ = apply_move(board, 4, "up")
    assert up[:4] == (1, 0, 0, 1) and up[4:8] == (2, 0, 0, 2)
    assert apply_move(board, 4, "down")[0][12:] == (2, 0, 0, 2)
    full = (1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8)
    assert not can_move(full, 4)


def test_start_is_seeded_and_spawns_follow_the_member_rng():
    env = make("game_2048")
    a = env.reset(4, rng_seed=1)
    assert env.board.count(0) == 14 and a == make("game_2048").reset(4, rng_seed=99)
    boards = []
    for rng_seed in (1, 1, 2):
        env.reset(4, rng_seed=rng_seed)
        for move in ("left", "up", "right", "down", "left"):
            env.step(move)
        boards.append(env.board)
    assert boards[0] == boards[1] != boards[2]


def test_invalid_and_ineffective_moves_and_rewards():
    env = make("game_2048")
    env.reset(0)
    env.board = (1, 1, 0, 0) + (0,) * 12
    before = env.snapshot()
    info = env.step("jump")[-1]
    assert not info["action_is_valid"] and env.snapshot() == before
    info = env.step("up")[-1]  # nothing can move up: valid, no effect, no spawn
    assert info["action_is_valid"] and not info["action_is_effective"]
    assert env.board == (1, 1) + (0,) * 14
    _, reward, _, _, info = env.step("L")
    assert info["merged"] == 4 and reward == pytest.approx(4 / 256)
    assert env.board[0] == 2 and env.board.count(0) == 14  # merged + one spawned tile


def test_win_and_loss_terminate():
    env = make("game_2048_small")
    env.reset(0)
    env.board = (5, 5, 0, 0, 0, 0, 0, 0, 0)
    _, _, terminated, _, info = env.step("left")
    assert terminated and info["success"] and env.success
    env.reset(0)
    env.board = (1, 2, 1, 2, 1, 4, 0, 5, 3)  # after left, a 2 or 4 spawns in the corner
    _, _, terminated, truncated, info = env.step("left")
    assert env.board[6:8] == (5, 3) and not can_move(env.board, 3)
    assert terminated and not info["success"] and info["game_over"] and not truncated


def test_oracle_beats_random_and_wins_the_small_board():
    env = make("game_2048_small")
    wins, random_wins = 0, 0
    for seed in range(4):
        env.reset(seed)
        while not env.done:
            env.step(env.oracle_action())
        wins += env.success
        env.reset(seed)
        rng = random.Random(seed)
        while not env.done:
            env.step(env.random_action(rng))
        random_wins += env.success
    assert wins == 4 and random_wins < 4


def test_check_env_and_rgb():
    for name in ("game_2048", "game_2048_small"):
        check_env(make(name), seeds=(0, 1))
    env = make("game_2048")
    env.reset(0)
    assert env.render("rgb").shape == (4 * 32, 4 * 32, 3)
    assert env.render().split().count("2") == 2
