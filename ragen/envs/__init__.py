"""ragen environments: a tiny text-env contract, a registry and the built-in suite.

    >>> import ragen.envs as envs
    >>> env = envs.make("sokoban")
    >>> obs = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step("up")

Every env here is registered by name with preset defaults (``make(name, **overrides)``);
a user's env plugs in by import path (``make("my_pkg.coin:CoinEnv")``), by file
(``"envs/coin.py:CoinEnv"``) or as an installed entry point of the group ``ragen.envs``
(:mod:`ragen.envs.registry`). See ``docs/ENVIRONMENTS.md`` for the knobs and for adding
your own.
"""

from .base import Env, derive_seed, make_info, normalize_action
from .registry import (
    ENTRY_POINT_GROUP,
    EnvSpec,
    check_name,
    check_options,
    config_keys,
    is_plugin,
    make,
    make_from_config,
    names,
    register,
    slug,
    spec,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Env",
    "EnvSpec",
    "check_name",
    "check_options",
    "config_keys",
    "is_plugin",
    "derive_seed",
    "make",
    "make_from_config",
    "make_info",
    "names",
    "normalize_action",
    "register",
    "slug",
    "spec",
]

_BANDIT = "ragen.envs.bandit:BanditEnv"
_SOKOBAN = "ragen.envs.sokoban.env:SokobanEnv"
_LAKE = "ragen.envs.frozen_lake:FrozenLakeEnv"

register(
    "bandit", _BANDIT, "Two-armed bandit, train names Phoenix (safe) / Dragon (risky); single turn"
)
register(
    "bandit_test",
    _BANDIT,
    "Two-armed bandit with unseen (safe, risky) name pairs, one per seed; single turn",
    arm_pairs="test",
)
register(
    "bandit_reversed",
    _BANDIT,
    "Two-armed bandit with reversed semantics: Phoenix is the risky arm; single turn",
    reversed_semantics=True,
)
register("sokoban", _SOKOBAN, "Sokoban 6x6, 1 box; push every box onto a target")
register(
    "sokoban_large",
    _SOKOBAN,
    "Sokoban 8x8, 2 boxes",
    dim_room=(8, 8),
    num_boxes=2,
)
register(
    "sokoban_symbols",
    _SOKOBAN,
    "Sokoban 6x6, 1 box, drawn with a different symbol vocabulary (letters)",
    symbols="letters",
)
register("frozen_lake", _LAKE, "FrozenLake 4x4, random map, slippery (intended move p=0.8)")
register("frozen_lake_det", _LAKE, "FrozenLake 4x4, random map, deterministic (p=1)", p=1.0)
register(
    "sokoban_visual",
    "ragen.envs.visual:VisualSokobanEnv",
    "Sokoban 6x6, 1 box, seen as an 84x84 picture (VAGEN; render('rgb'), 14 px cells)",
)
register(
    "frozen_lake_visual",
    "ragen.envs.visual:VisualFrozenLakeEnv",
    "FrozenLake 4x4, slippery, seen as an 84x84 picture (VAGEN; render('rgb'), 21 px cells)",
)
register(
    "countdown",
    "ragen.envs.countdown:CountdownEnv",
    "Countdown: reach the target from 3-4 numbers with + - * / (single turn)",
)
register(
    "gym_frozen_lake",
    "ragen.envs.gym_adapter:GymFrozenLakeEnv",
    "gymnasium FrozenLake-v1 (fixed 4x4 map, slippery) via the adapter",
)
register(
    "gym_taxi",
    "ragen.envs.gym_adapter:GymTaxiEnv",
    "gymnasium Taxi via the adapter",
)

# -- procedural puzzles (solvers as oracles) ----------------------------------------------------
_SUDOKU = "ragen.envs.sudoku:SudokuEnv"
_2048 = "ragen.envs.game2048:Game2048Env"
_CUBE = "ragen.envs.cube2x2:Cube2x2Env"
register("sudoku", _SUDOKU, "Sudoku 4x4 (8 givens): fill rows, columns and 2x2 boxes with 1-4")
register("sudoku_9x9", _SUDOKU, "Sudoku 9x9 (36 givens): the classic puzzle", size=9)
register("game_2048", _2048, "2048 on 4x4: slide and merge tiles to reach 256")
register("game_2048_small", _2048, "2048 on 3x3: reach 64", size=3, win_tile=64)
register("cube2x2", _CUBE, "2x2 Rubik's cube scrambled by 3 turns; restore one colour per face")
register(
    "cube2x2_hard",
    _CUBE,
    "2x2 Rubik's cube scrambled by 11 turns (optimal solutions of 5-10 moves)",
    scramble_depth=11,
    max_steps=30,
)

# -- TextArena's single-player games (optional: ragen[textarena]) -------------------------------
_TEXTARENA = "ragen.envs.textarena_adapter:TextArenaEnv"
register(
    "textarena",
    _TEXTARENA,
    "Any single-player TextArena game by id (game=Wordle-v0); needs ragen[textarena]",
)
register(
    "ta_tower_of_hanoi",
    _TEXTARENA,
    "TextArena Tower of Hanoi, 3 disks, 14 moves; needs ragen[textarena]",
    game="TowerOfHanoi-v0",
)
register(
    "ta_guess_the_number",
    _TEXTARENA,
    "TextArena Guess the Number, 1-20 in 10 guesses; needs ragen[textarena]",
    game="GuessTheNumber-v0",
)
register(
    "ta_mastermind",
    _TEXTARENA,
    "TextArena Mastermind, 4 digits of 1-6 without repeats, 20 guesses; needs ragen[textarena]",
    game="Mastermind-v0",
)

# -- an environment served over HTTP (`ragen serve-env NAME`) -----------------------------------
register(
    "remote",
    "ragen.envs.remote:RemoteEnv",
    "An environment served over HTTP by `ragen serve-env NAME` (url=http://HOST:PORT)",
)

# -- worlds users already have (optional extras; docs/ENVIRONMENTS.md) ---------------------------
register(
    "openenv",
    "ragen.envs.openenv_adapter:OpenEnvEnv",
    "Any OpenEnv environment server (url=http://HOST:PORT); needs ragen[openenv]",
)
_RG = "ragen.envs.reasoning_gym_env:ReasoningGymEnv"
register(
    "reasoning_gym",
    _RG,
    "reasoning-gym task generators by name (task=..., task_config=...); needs ragen[reasoning-gym]",
)
register(
    "rg_arithmetic",
    _RG,
    "reasoning-gym basic_arithmetic, 2-3 terms of 1-2 digits (single turn); ragen[reasoning-gym]",
    task="basic_arithmetic",
    task_config={"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2},
)
register(
    "rg_arithmetic_retry",
    _RG,
    "rg_arithmetic with 3 answers: retry after feedback (multi-turn); ragen[reasoning-gym]",
    task="basic_arithmetic",
    task_config={"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2},
    max_attempts=3,
)
register(
    "rg_puzzles",
    _RG,
    "reasoning-gym mix: mini_sudoku, knights_knaves, word_sorting (seed picks); "
    "ragen[reasoning-gym]",
    task=["mini_sudoku", "knights_knaves", "word_sorting"],
)
_TW = "ragen.envs.textworld_env:TextWorldEnv"
register(
    "textworld",
    _TW,
    "TextWorld text adventure per seed: 3 rooms, 3-command quest; needs ragen[textworld]",
)
register(
    "textworld_hard",
    _TW,
    "TextWorld: 6 rooms, 10 objects, 6-command quest, brief objective; needs ragen[textworld]",
    nb_rooms=6,
    nb_objects=10,
    quest_length=6,
    objective="brief",
    max_steps=80,
)
_DUEL = "ragen.envs.textarena_two_player:TwoPlayerTextArenaEnv"
register(
    "ta_tictactoe",
    _DUEL,
    "TextArena Tic Tac Toe vs a scripted opponent, either side; needs ragen[textarena]",
    game="TicTacToe-v0",
)
register(
    "ta_connect_four",
    _DUEL,
    "TextArena Connect Four vs a scripted opponent, either side; needs ragen[textarena]",
    game="ConnectFour-v0",
)
register(
    "ta_nim",
    _DUEL,
    "TextArena Nim (piles 3 4 5) vs a scripted opponent, either side; needs ragen[textarena]",
    game="Nim-v0",
)
