"""The grid_scale study's variant syntax: ``NAME@ENV:ITEMS`` runs a variant on one env."""

import pytest

from experiments.grid_scale.run import scoped_variant

ENVS = ["frozen_lake", "sokoban"]


def test_a_plain_variant_runs_on_every_env():
    assert scoped_variant("x16:groups=64", ENVS) == ("x16:groups=64", ENVS)
    assert scoped_variant("demo:", ENVS) == ("demo:", ENVS)


def test_an_env_scoped_variant_runs_on_that_env_alone():
    assert scoped_variant("x16-all@sokoban:groups=64,steps=40", ENVS) == (
        "x16-all:groups=64,steps=40",
        ["sokoban"],
    )
    assert scoped_variant("demo@frozen_lake", ENVS) == ("demo", ["frozen_lake"])


def test_an_env_not_swept_is_a_clear_error():
    with pytest.raises(SystemExit, match="'sokoban' is not among --env"):
        scoped_variant("x@sokoban:groups=64", ["frozen_lake"])
