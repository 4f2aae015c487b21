"""Issue 36 ("no silent garbage"), the environment items: each test replays the input the
probe used and checks what the program does now (docs/RELIABILITY_ENVS.md lists them)."""

from __future__ import annotations

import pytest

from ragen.envs import make
from ragen.errors import EnvOptionError, RagenError


# -- bad env options are user errors (one line from the CLI) -----------------------------
@pytest.mark.parametrize(
    "name, options, message",
    [
        ("frozen_lake", {"p": 1.5}, r"environment 'frozen_lake': p=1.5 must be a probability"),
        ("frozen_lake", {"desc": ["SFX", "FFG"]}, "unknown cell"),
        ("sokoban", {"dim_room": "abc"}, "dim_room must be two whole numbers"),
        ("sokoban", {"dim_room": [2, 2]}, "too small"),
        ("sokoban", {"max_steps": 0}, "max_steps=0 must be >= 1"),
        ("countdown", {"number_use": "twice"}, "number_use"),
        ("sudoku", {"size": 5}, "size=5"),
        ("game_2048", {"win_tile": 7}, "win_tile=7"),
        ("bandit", {"high_prob": 2}, "high_prob=2"),
        ("remote", {"url": "localhost:1"}, "not an HTTP address"),
    ],
)
def test_bad_env_options_raise_the_user_error_class(name, options, message):
    with pytest.raises(EnvOptionError, match=message) as err:
        make(name, **options)
    # a RagenError: `ragen <command>` prints it as one line; still a ValueError for callers
    assert isinstance(err.value, RagenError) and isinstance(err.value, ValueError)
    assert "\n" not in str(err.value)
