"""Observation formats of the grid envs: ``grid`` (default), ``coord`` and ``grid_coord``.

The coord text is exact on hand-built maps and rooms, parses with ``parse_facts``,
determines the whole state (the test rebuilds the grid from it), and the train /
validation key (``state_key``) is the grid in every format.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from ragen.agent.env_manager import is_held_out
from ragen.envs import make
from ragen.envs.checker import check_env
from ragen.envs.facts import OBSERVATION_FORMATS, Fact, parse_facts
from ragen.envs.games.frozen_lake import FrozenLakeEnv
from ragen.envs.games.sokoban import SokobanEnv, parse_levels

GRID_ENVS = ("frozen_lake", "frozen_lake_det", "sokoban", "sokoban_large", "sokoban_symbols")
LAKE_DESC = ["SFHF", "FFFF", "FFFH", "FFFG"]
LAKE_GRID = "P_O_\n____\n___O\n___G"
LAKE_COORD = "size (4,4); player (0,0); goal (3,3); hole (0,2); hole (2,3)"
ROOM_LEVEL = "#####\n#@  #\n##$ #\n#  .#\n#####"
ROOM_GRID = "#####\n#P__#\n##X_#\n#__O#\n#####"
ROOM_COORD = "size (5,5); player (1,1); box (2,2); target (3,3); wall (2,1)"


def test_the_formats():
    assert OBSERVATION_FORMATS == ("grid", "coord", "grid_coord")


@pytest.mark.parametrize(
    "fmt, expected",
    [("grid", LAKE_GRID), ("coord", LAKE_COORD), ("grid_coord", f"{LAKE_GRID}\n{LAKE_COORD}")],
)
def test_frozen_lake_observation_by_hand(fmt, expected):
    env = FrozenLakeEnv(desc=LAKE_DESC, observation_format=fmt)
    assert env.reset(0) == expected == env.render("text")
    obs, *_ = env.step("down")  # p = 0.8: wherever it lands, the obs is the format's
    assert obs == env.render("text")
    assert (fmt != "grid") == obs.endswith(env.coord_text())


@pytest.mark.parametrize(
    "fmt, expected",
    [("grid", ROOM_GRID), ("coord", ROOM_COORD), ("grid_coord", f"{ROOM_GRID}\n{ROOM_COORD}")],
)
def test_sokoban_observation_by_hand(fmt, expected):
    env = SokobanEnv(levels=parse_levels(ROOM_LEVEL), observation_format=fmt)
    assert env.reset(0) == expected
    obs, *_ = env.step("right")
    assert (
        obs
        == {
            "grid": "#####\n#_P_#\n##X_#\n#__O#\n#####",
            "coord": "size (5,5); player (1,2); box (2,2); target (3,3); wall (2,1)",
            "grid_coord": "#####\n#_P_#\n##X_#\n#__O#\n#####\n"
            "size (5,5); player (1,2); box (2,2); target (3,3); wall (2,1)",
        }[fmt]
    )


def test_coord_lists_objects_on_targets_and_holes_under_both_kinds():
    env = SokobanEnv(levels=parse_levels("######\n#+$  #\n# *$.#\n#    #\n######"))
    env = SokobanEnv(levels=env.levels, observation_format="coord")
    assert env.reset(0) == (
        "size (5,6); player (1,1); box (1,2); box (2,2); box (2,3); "
        "target (1,1); target (2,2); target (2,4)"  # no wall inside the border
    )
    env = FrozenLakeEnv(desc=["SHF", "FFG"], observation_format="coord", p=1.0)
    env.reset(0)
    obs, *_ = env.step("right")
    assert obs == "size (2,3); player (0,1); goal (1,2); hole (0,1)"


def test_the_default_grid_is_todays_text():
    """``grid`` is the default and the text is exactly the old observation."""
    assert make("sokoban").observation_format == "grid"
    assert make("frozen_lake").observation_format == "grid"
    lake = FrozenLakeEnv(desc=LAKE_DESC)
    assert lake.reset(0) == LAKE_GRID
    room = SokobanEnv(levels=parse_levels(ROOM_LEVEL), symbols="letters")
    assert room.reset(0) == "WWWWW\nWA..W\nWWB.W\nW..TW\nWWWWW"


def test_symbols_apply_to_the_grid_only():
    plain = make("sokoban", observation_format="grid_coord")
    letters = make("sokoban_symbols", observation_format="grid_coord")
    for seed in range(5):
        grid, coord = plain.reset(seed).rsplit("\n", 1)
        letter_grid, letter_coord = letters.reset(seed).rsplit("\n", 1)
        assert coord == letter_coord  # words, whatever the symbols
        assert grid != letter_grid and grid == plain.grid_text()
        assert "W" in letter_grid and "#" in grid


# -- the coord text determines the state ---------------------------------------------------
def lake_grid_from_coord(text: str) -> str:
    """Rebuild FrozenLake's grid from its coord text alone."""
    parsed = parse_facts(text, FrozenLakeEnv.coord_kinds)
    assert parsed.ok, parsed.error
    by_kind: dict[str, list[tuple[int, int]]] = {}
    for f in parsed.facts:
        by_kind.setdefault(f.kind, []).append((f.row, f.col))
    ((rows, cols),) = by_kind["size"]
    ((player),) = by_kind["player"]
    ((goal),) = by_kind["goal"]
    holes = set(by_kind.get("hole", []))
    chars = [["_"] * cols for _ in range(rows)]
    for r, c in holes:
        chars[r][c] = "O"
    chars[goal[0]][goal[1]] = "G"
    chars[player[0]][player[1]] = "X" if player in holes else "√" if player == goal else "P"
    return "\n".join("".join(row) for row in chars)


def room_grid_from_coord(text: str) -> str:
    """Rebuild Sokoban's grid (ragen symbols) from its coord text alone."""
    parsed = parse_facts(text, SokobanEnv.coord_kinds)
    assert parsed.ok, parsed.error
    cells: dict[str, set[tuple[int, int]]] = {}
    for f in parsed.facts:
        cells.setdefault(f.kind, set()).add((f.row, f.col))
    ((rows, cols),) = cells["size"]
    ((player),) = cells["player"]
    boxes, targets = cells.get("box", set()), cells.get("target", set())
    walls = cells.get("wall", set())
    out = []
    for r in range(rows):
        row = ""
        for c in range(cols):
            cell = (r, c)
            if r in (0, rows - 1) or c in (0, cols - 1) or cell in walls:
                row += "#"
            elif cell == player:
                row += "S" if cell in targets else "P"
            elif cell in boxes:
                row += "√" if cell in targets else "X"
            else:
                row += "O" if cell in targets else "_"
        out.append(row)
    return "\n".join(out)


@pytest.mark.parametrize("name", GRID_ENVS)
def test_coord_round_trips_and_determines_the_state(name):
    """Over many states: the coord text parses, rebuilds the grid exactly (so it holds
    the whole state) and two different states never share a coord text."""
    env = make(name, observation_format="coord")
    rebuild = lake_grid_from_coord if name.startswith("frozen") else room_grid_from_coord
    plain = make("sokoban" if name == "sokoban_symbols" else name)
    rng = random.Random(5)
    grid_of: dict[str, str] = {}
    for seed in range(30):
        env.reset(seed)
        plain.reset(seed)
        for _ in range(rng.randint(0, 8)):
            if env.done:
                break
            action = env.random_action(rng)
            env.step(action)
            plain.step(action)
        text = env.render("text")
        assert text == env.coord_text()
        parsed = parse_facts(text, env.coord_kinds)
        size = (env.rows, env.cols) if name.startswith("frozen") else (env.height, env.width)
        assert parsed.ok and parsed.facts[0] == Fact("size", *size)
        # same seeds and actions (and rng seeds): ``plain`` is the same state, drawn in
        # the default symbols that the rebuild uses
        assert rebuild(text) == plain.render("text")
        assert grid_of.setdefault(text, env.grid_text()) == env.grid_text()
    assert len(grid_of) > 20  # many distinct states were seen


# -- state_key, errors, rgb, instructions, the checker ---------------------------------------
@pytest.mark.parametrize("name", GRID_ENVS)
def test_state_key_is_the_grid_in_every_format(name):
    envs = {fmt: make(name, observation_format=fmt) for fmt in OBSERVATION_FORMATS}
    for seed in range(20):
        for env in envs.values():
            env.reset(seed)
        keys = {fmt: env.state_key() for fmt, env in envs.items()}
        assert len(set(keys.values())) == 1, keys
        assert keys["grid"] == envs["grid"].render("text")
        # so the held-out split of initial states is the same in every format
        assert len({is_held_out(k) for k in keys.values()}) == 1


@pytest.mark.parametrize("name", GRID_ENVS)
def test_rgb_is_the_same_in_every_format(name):
    frames = []
    for fmt in OBSERVATION_FORMATS:
        env = make(name, observation_format=fmt)
        env.reset(3)
        frames.append(env.render("rgb"))
    assert all(np.array_equal(frames[0], f) for f in frames[1:])


@pytest.mark.parametrize("cls", [FrozenLakeEnv, SokobanEnv])
def test_unknown_format_is_a_value_error_naming_the_choices(cls):
    with pytest.raises(ValueError, match="observation_format.*grid, coord, grid_coord"):
        cls(observation_format="coords")
    with pytest.raises(ValueError, match="Did you mean 'coord'"):
        make("sokoban" if cls is SokobanEnv else "frozen_lake", observation_format="cord")


@pytest.mark.parametrize("name", GRID_ENVS)
def test_instructions_name_the_convention_and_the_coord_reading(name):
    for fmt in OBSERVATION_FORMATS:
        text = make(name, observation_format=fmt).instructions
        assert "(row,col), counted from 0 at the top-left" in text
        assert ("size (rows,cols)" in text) == (fmt != "grid")
        # the symbol legend goes with the grid
        assert ("Symbols" in text) == (fmt != "coord")


@pytest.mark.parametrize("fmt", OBSERVATION_FORMATS)
@pytest.mark.parametrize("name", GRID_ENVS)
def test_check_env_passes_in_every_format(name, fmt):
    env = make(name, observation_format=fmt)
    check_env(env, seeds=(0, 1), max_steps=30, fuzz=10)
