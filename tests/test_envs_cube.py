"""2x2 cube: face turns from rotations, the meet-in-the-middle optimal solver."""

from __future__ import annotations

import random

import pytest

from ragen.envs import make
from ragen.envs.checker import check_env
from ragen.envs.games import cube2x2 as cube


def _play(state, moves):
    for m in moves:
        state = cube.apply(state, m)
    return state


def test_turns_are_permutations_with_the_right_orders():
    for face in cube.TURN_FACES:
        assert _play(cube.SOLVED, [face] * 4) == cube.SOLVED
        assert _play(cube.SOLVED, [face, face + "'"]) == cube.SOLVED
        assert _play(cube.SOLVED, [face + "2"]) == _play(cube.SOLVED, [face, face])
    sexy = ["R", "U", "R'", "U'"]
    assert _play(cube.SOLVED, sexy * 6) == cube.SOLVED
    assert all(_play(cube.SOLVED, sexy * k) != cube.SOLVED for k in range(1, 6))
    # a quarter turn moves 12 stickers: the 4 of its face and 8 on the sides
    moved = sum(a != b for a, b in zip(cube.MOVES["U"], range(24)))
    assert moved == 12
    assert sorted(cube.SOLVED).count("W") == 4


def test_solver_is_optimal_on_known_distances_and_random_states():
    assert cube.solve(cube.SOLVED) == []
    for moves in (["R"], ["R", "U"], ["R", "U", "F"], ["U2", "R'", "F", "U"]):
        plan = cube.solve(_play(cube.SOLVED, moves))
        assert len(plan) == len(moves)  # none of these is shortened by a shortcut
        assert _play(_play(cube.SOLVED, moves), plan) == cube.SOLVED
    rng = random.Random(0)
    for _ in range(20):
        state = _play(cube.SOLVED, [rng.choice(cube.ACTION_NAMES) for _ in range(30)])
        plan = cube.solve(state)
        assert len(plan) <= cube.GODS_NUMBER and _play(state, plan) == cube.SOLVED
        # no shorter plan exists: depth-limited search one turn shorter finds nothing
        if len(plan) <= 4:
            assert not _reachable(state, len(plan) - 1)


def _reachable(state, depth):
    frontier = {state}
    for _ in range(depth):
        if cube.SOLVED in frontier:
            return True
        frontier = {cube.apply(s, m) for s in frontier for m in cube.MOVES}
    return cube.SOLVED in frontier


@pytest.mark.parametrize("name, depth", [("cube2x2", 3), ("cube2x2_hard", 11)])
def test_oracle_solves_within_the_scramble_depth(name, depth):
    env = make(name)
    for seed in range(5):
        env.reset(seed)
        assert len(env.scramble) == depth
        plan_len = len(env.optimal_plan())
        assert 1 <= plan_len <= depth
        steps = 0
        while not env.done:
            env.step(env.oracle_action())
            steps += 1
        assert env.success and steps == plan_len


def test_actions_and_progress_potential():
    env = make("cube2x2")
    env.reset(2)
    before = env.snapshot()
    for bad in ("L", "x", "R3", "", "u u"):
        info = env.step(bad)[-1]
        assert not info["action_is_valid"]
    assert env.snapshot() == before
    assert env.step(" r' ")[-1]["action_is_valid"]
    env.reset(2)
    phi0 = env.progress_potential()
    assert phi0 == -1.0
    env.step(env.oracle_action())
    assert env.progress_potential() > phi0
    text = env.render()
    assert len(text.splitlines()) == 6
    assert env.render("rgb").shape == (6 * 16, 8 * 16, 3)


def test_truncation_and_check_env():
    env = make("cube2x2", max_steps=2)
    env.reset(0)
    env.step("U")
    truncated = env.step("U'")[3]
    assert truncated or env.success
    for name in ("cube2x2", "cube2x2_hard"):
        check_env(make(name), seeds=(0, 1))


def test_expert_data_for_sft():
    from fakes import tiny_tokenizer

    from ragen.agent.rollout import RolloutConfig
    from ragen.sft.config import SFTConfig
    from ragen.sft.expert_data import make_expert_data

    data = make_expert_data(
        tiny_tokenizer(), SFTConfig(env="cube2x2", episodes=3, rollout=RolloutConfig())
    )
    assert len(data) == 3 and all(t.success for t in data)


def test_ragen_play_shows_the_solver_solving():
    import io

    from ragen.envs.cli import play

    out = io.StringIO()
    assert play(make("cube2x2"), seed=1, solver=True, out=out) == 0
    text = out.getvalue()
    assert "solver> " in text and "episode over: success=True" in text
