"""Sokoban: generator (solvable, reproducible, fast), optimal solver, level files, env rules."""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen.envs import make
from ragen.envs.games.sokoban import (
    Room,
    SokobanEnv,
    format_levels,
    generate_room,
    load_levels,
    parse_levels,
    save_levels,
    solve,
    solve_room,
)
from ragen.envs.games.sokoban.room import direction_offsets

PROPERTY = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def room_from(text: str) -> Room:
    (room,) = parse_levels(text)
    return room


def plain_bfs_length(room: Room) -> int | None:
    """Reference: move-level BFS without any pruning (slow but obviously right)."""
    offsets = direction_offsets(room.width)
    start = (room.player, room.boxes)
    seen = {start}
    queue = deque([(start, 0)])
    while queue:
        (player, boxes), dist = queue.popleft()
        if boxes == room.targets:
            return dist
        for d in offsets:
            nxt = player + d
            if not room.floor[nxt]:
                continue
            new_boxes = boxes
            if nxt in boxes:
                dest = nxt + d
                if not room.floor[dest] or dest in boxes:
                    continue
                new_boxes = (boxes - {nxt}) | {dest}
            state = (nxt, new_boxes)
            if state not in seen:
                seen.add(state)
                queue.append((state, dist + 1))
    return None


def play(env: SokobanEnv, plan: list[str]) -> tuple[float, bool]:
    """Play ``plan``; the total reward and whether the last step terminated."""
    total, terminated = 0.0, False
    for action in plan:
        _, reward, terminated, truncated, _ = env.step(action)
        assert not truncated
        total += reward
    return total, terminated


# -- generator + solver ---------------------------------------------------------------------------
@PROPERTY
@given(seed=st.integers(0, 2**40))
def test_generated_6x6_rooms_are_solved_by_the_solver_plan(seed):
    env = make("sokoban")
    env.reset(seed)
    plan = solve(env)
    assert plan, "every generated room is unsolved and solvable"
    _, done = play(env, plan)
    assert done and env.success


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**40))
def test_generated_8x8_two_box_rooms_are_solved_by_the_solver_plan(seed):
    env = make("sokoban_large")
    env.reset(seed)
    plan = solve(env)
    assert plan
    _, done = play(env, plan)
    assert done and env.success


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**40),
    dim=st.sampled_from([(6, 6), (7, 7), (8, 8)]),
    boxes=st.integers(1, 2),
)
def test_solver_plans_are_optimal_against_unpruned_bfs(seed, dim, boxes):
    room = generate_room(random.Random(seed), dim, boxes)
    plan = solve_room(room)
    assert plan is not None and len(plan) == plain_bfs_length(room)


def test_generation_is_a_pure_function_of_the_seed():
    rooms = [generate_room(random.Random(s), (7, 8), 2) for s in range(20)]
    assert rooms == [generate_room(random.Random(s), (7, 8), 2) for s in range(20)]
    assert len(set(rooms)) > 15
    for room in rooms:
        assert (room.height, room.width) == (7, 8) and len(room.boxes) == 2
        assert room.boxes != room.targets


def test_impossible_configs_name_the_parameter():
    with pytest.raises(ValueError, match="num_boxes=9"):
        SokobanEnv(dim_room=(4, 4), num_boxes=9)
    with pytest.raises(ValueError, match="num_boxes=0"):
        SokobanEnv(num_boxes=0)
    with pytest.raises(ValueError, match="dim_room"):
        SokobanEnv(dim_room=(2, 9))
    with pytest.raises(ValueError, match="symbols"):
        SokobanEnv(symbols="emoji")


def test_min_solution_length_filters_rooms():
    env = SokobanEnv(min_solution_length=6)
    for seed in range(5):
        env.reset(seed)
        assert env.optimal_solution_length() >= 6


def test_solver_edge_cases():
    assert solve_room(room_from("#####\n#@* #\n#####")) == []  # already solved
    # box in a corner off target (a dead square): unsolvable
    dead = room_from("######\n#$  .#\n#@   #\n######")
    assert solve_room(dead) is None and plain_bfs_length(dead) is None
    # boxes frozen against the top wall can never reach the lower target
    frozen = room_from("#######\n# $$ .#\n#@   .#\n#######")
    assert solve_room(frozen) is None and plain_bfs_length(frozen) is None
    # the search limit gives up cleanly
    big = generate_room(random.Random(1), (9, 9), 3)
    assert solve_room(big, max_states=5) is None


# -- env rules ---------------------------------------------------------------------------------------
def test_rewards_push_on_push_off_and_solve():
    level = "#######\n#@$ . #\n#  $ .#\n#######"
    env = SokobanEnv(levels=parse_levels(level))
    env.reset(0)
    _, r, done, _, info = env.step("right")  # box one step closer
    assert r == pytest.approx(-0.1) and info["action_is_effective"] and not done
    _, r, _, _, info = env.step("right")  # box onto the target
    assert r == pytest.approx(0.9) and info["boxes_on_target"] == 1
    r = env.step("right")[1]  # and off again
    assert r == pytest.approx(-1.1)
    env.reset(0)
    plan = solve(env)
    total, done = play(env, plan)
    assert done and env.success
    # two boxes end on targets (+1 each), +10 for solving, -0.1 per move
    assert total == pytest.approx(-0.1 * len(plan) + 2 + 10)


def test_wall_bumps_cost_a_step_and_invalid_actions_change_nothing():
    env = SokobanEnv(levels=parse_levels("#####\n#@$.#\n#####"))
    obs = env.reset(0)
    _, r, _, _, info = env.step("up")
    assert info["action_is_valid"] and not info["action_is_effective"] and r == pytest.approx(-0.1)
    before = env.snapshot()
    for junk in ["", "jump", "upp", "up left", "<answer>up</answer>", "1", "\x00"]:
        o, r, terminated, truncated, info = env.step(junk)
        assert not info["action_is_valid"] and r == 0.0 and o == obs
        assert not terminated and not truncated
    assert env.snapshot() == before
    _, r, terminated, truncated, info = env.step(" R ")  # alias, case/whitespace-insensitive
    assert terminated and not truncated and info["success"] and r == pytest.approx(10.9)


def test_max_steps_truncates():
    """The step counter is not in the observation: hitting it truncates, not terminates."""
    env = SokobanEnv(levels=parse_levels("#####\n#@$.#\n#####"), max_steps=3)
    env.reset(0)
    results = [env.step("up") for _ in range(3)]  # wall bumps
    assert [(r[2], r[3]) for r in results] == [(False, False), (False, False), (False, True)]
    assert not results[-1][4]["success"] and env.done and env.truncated
    # solving on the last allowed step terminates and does not also truncate
    env.reset(0)
    env.step("up")
    env.step("up")
    assert env.step("right")[2:4] == (True, False) and env.success


def test_symbol_vocabularies_and_rgb():
    default, letters = make("sokoban"), make("sokoban_symbols")
    a, b = default.reset(5), letters.reset(5)
    table = str.maketrans("#_OX√PS", "W.TBDAa")
    assert a.translate(table) == b
    assert "W : wall" in letters.instructions and "# : wall" in default.instructions
    assert "Answer with one or more of: up, down, left, right" in default.instructions
    frame = default.render("rgb")
    assert frame.dtype == np.uint8 and frame.shape == (6 * 16, 6 * 16, 3)
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 5  # walls, floor, target, box, player
    with pytest.raises(ValueError, match="mode"):
        default.render("ascii")


def test_oracle_follows_an_optimal_plan_and_replans_after_a_detour():
    env = make("sokoban_large")
    env.reset(11)
    optimal = env.optimal_solution_length()
    # a detour that moves the player but no box
    boxes = env.room.boxes
    for action in env.action_names:
        env.reset(11)
        info = env.step(action)[-1]
        if info["action_is_effective"] and env.room.boxes == boxes:
            break
    steps = 1
    while not env.done and steps < 100:
        env.step(env.oracle_action())
        steps += 1
    assert env.success and steps <= optimal + 2
    env.reset(11)
    steps = 0
    while not env.done and steps < 100:
        env.step(env.oracle_action())
        steps += 1
    assert env.success and steps == optimal


# -- level files --------------------------------------------------------------------------------------
def test_shipped_levels_load_and_play_seed_mod_n():
    rooms = load_levels("handmade")
    assert len(rooms) >= 4 and all(solve_room(r) for r in rooms)
    env = make("sokoban", levels="handmade")
    assert env.reset(1) == env.reset(1 + len(rooms))
    assert env.reset(0) != env.reset(1)
    # the irregular level: blank corner outside the walls became wall
    assert rooms[2].floor[0] is False


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32),
    dim=st.sampled_from([(5, 7), (6, 6), (8, 8)]),
    boxes=st.integers(1, 2),
)
def test_level_files_round_trip(tmp_path_factory, seed, dim, boxes):
    rooms = [generate_room(random.Random(seed + k), dim, boxes) for k in range(3)]
    path = save_levels(rooms, tmp_path_factory.mktemp("levels") / "rooms.txt")
    assert load_levels(path) == rooms
    assert parse_levels(format_levels(rooms)) == rooms


def test_level_format_symbols_and_errors():
    room = room_from("; a comment\n#######\n#+ $  #\n#  *$ #\n#    .#\n#######\n")
    assert room.player in room.targets and len(room.boxes) == 3
    assert len(room.boxes & room.targets) == 1
    assert parse_levels("; only comments\n\n") == []
    with pytest.raises(ValueError, match="exactly one player"):
        parse_levels("#####\n#@$.#\n#@  #\n#####")
    with pytest.raises(ValueError, match="as many boxes"):
        parse_levels("#####\n#@$$.#\n#####")
    with pytest.raises(ValueError, match=r"<string>:2: unexpected character"):
        parse_levels("#####\n#@$Z.#\n#####")
    with pytest.raises(ValueError, match="not enclosed"):
        parse_levels("#####\n#@$. \n#####")
    with pytest.raises(FileNotFoundError, match="handmade"):
        load_levels("no_such_levels_file")
