"""Sudoku: unique-solution generation, the rules, the optimal oracle, the expert data."""

from __future__ import annotations

import random

import pytest

from ragen.envs import make
from ragen.envs.checker import check_env
from ragen.envs.games.sudoku import count_solutions, generate_puzzle


@pytest.mark.parametrize("size, givens", [(4, 6), (4, 8), (9, 30)])
def test_generated_puzzles_have_one_solution_and_the_asked_givens(size, givens):
    for seed in range(3):
        puzzle, solution = generate_puzzle(random.Random(seed), size, givens)
        assert sum(v != 0 for v in puzzle) == givens
        assert all(p in (0, s) for p, s in zip(puzzle, solution))
        count, found = count_solutions(puzzle, size, limit=2)
        assert count == 1 and found == solution
        rows = [solution[r * size : (r + 1) * size] for r in range(size)]
        assert all(sorted(row) == list(range(1, size + 1)) for row in rows)
        assert all(sorted(col) == list(range(1, size + 1)) for col in zip(*rows))


def test_a_puzzle_that_cannot_lose_more_cells_keeps_its_givens():
    env = make("sudoku", givens=0)  # 4x4 minimum for uniqueness is 4
    env.reset(0)
    assert 4 <= env.num_givens < 8
    assert count_solutions(env.grid, 4)[0] == 1


def test_rules_invalid_moves_change_nothing_and_mistakes_can_be_erased():
    env = make("sudoku")
    env.reset(3)
    given = env.fixed.index(True)
    r, c = divmod(given, 4)
    before = env.snapshot()
    _, _, _, _, info = env.step(f"{r + 1} {c + 1} {env.grid[given]}")
    assert not info["action_is_valid"] and "given" in info["reason"] and env.snapshot() == before
    empty = env.grid.index(0)
    r, c = divmod(empty, 4)
    peer_digit = next(env.grid[p] for p in env._peers[empty] if env.grid[p])
    _, _, _, _, info = env.step(f"{r + 1},{c + 1},{peer_digit}")
    assert not info["action_is_valid"] and "already stands" in info["reason"]
    for bad in ("5 1 1", "1 1 9", "0 1 1", "one two three", "1 1"):
        assert not env.step(bad)[-1]["action_is_valid"]
    assert env.snapshot() == before
    # a wrong-but-allowed digit, then erase it with 0
    empty, wrong = next(
        (i, d)
        for i in range(16)
        for d in range(1, 5)
        if env.grid[i] == 0
        and d != env.solution[i]
        and all(env.grid[p] != d for p in env._peers[i])
    )
    r, c = divmod(empty, 4)
    assert env.step(f"{r + 1} {c + 1} {wrong}")[-1]["action_is_valid"]
    assert env.grid[empty] == wrong
    assert env.step(f"{r + 1} {c + 1} 0")[-1]["action_is_effective"]
    assert env.grid[empty] == 0


@pytest.mark.parametrize("name", ["sudoku", "sudoku_9x9"])
def test_oracle_is_optimal_from_the_start_and_recovers_from_mistakes(name):
    env = make(name)
    for seed in range(3):
        env.reset(seed)
        empties = env.grid.count(0)
        total, steps = 0.0, 0
        while not env.done:
            total += env.step(env.oracle_action())[1]
            steps += 1
        assert env.success and env.terminated and total == 1.0 and steps == empties
    # fill every empty cell with some allowed wrong digit, then let the oracle finish
    rng = random.Random(0)
    env.reset(5)
    for _ in range(40):
        env.step(env.random_action(rng))
        if env.done:
            break
    env.max_steps = None
    env._limit = 10_000
    for _ in range(500):
        if env.done:
            break
        env.step(env.oracle_action())
    assert env.success


def test_truncated_after_max_steps_and_renders():
    env = make("sudoku", max_steps=2)
    env.reset(1)
    empty = env.grid.index(0)
    r, c = divmod(empty, 4)
    assert not env.step(f"{r + 1} {c + 1} 0")[3]  # erase an empty cell: valid, no effect
    assert env.step(f"{r + 1} {c + 1} 0")[3]  # second valid move: truncated
    text = env.render()
    assert text.splitlines()[0].split() == ["1", "2", "|", "3", "4"]
    frame = make("sudoku_9x9").render("rgb")
    assert frame.shape == (9 * 24, 9 * 24, 3)


@pytest.mark.parametrize("name", ["sudoku", "sudoku_9x9"])
def test_check_env(name):
    check_env(make(name), seeds=(0, 1))


def test_expert_data_for_sft():
    from fakes import tiny_tokenizer

    from ragen.agent.rollout import RolloutConfig
    from ragen.sft.config import SFTConfig
    from ragen.sft.expert_data import make_expert_data

    rollout = RolloutConfig(max_turns=5, max_actions_per_turn=2, max_actions_per_trajectory=10)
    data = make_expert_data(
        tiny_tokenizer(), SFTConfig(env="sudoku", episodes=3, actions_per_turn=2, rollout=rollout)
    )
    assert len(data) == 3 and all(t.success for t in data)
    assert all(t.num_response_tokens > 0 for t in data)
