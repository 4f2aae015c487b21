"""experiments.grids.eval_checkpoints: which checkpoint of a study's RL run it
evaluates, and a clear stop when the results folder holds no warm start."""

import pytest

from experiments.grids.eval_checkpoints import checkpoint_actor, main


def _checkpoint(variant, step):
    (variant / "checkpoints" / f"step_{step:06d}" / "actor").mkdir(parents=True)


def test_the_last_saved_checkpoint_or_the_step_asked_for(tmp_path):
    variant = tmp_path / "base"
    assert checkpoint_actor(variant, None) is None  # nothing saved yet
    for step in (10, 20):
        _checkpoint(variant, step)
    assert checkpoint_actor(variant, None) == variant / "checkpoints/step_000020/actor"
    assert checkpoint_actor(variant, 10) == variant / "checkpoints/step_000010/actor"
    assert checkpoint_actor(variant, 15) is None


def test_a_folder_without_a_warm_start_says_what_to_point_at(tmp_path):
    with pytest.raises(SystemExit, match="no warm start in .*sokoban/seed0/sft. Fix: point --out"):
        main(["--config", "tiny-cpu", "--out", str(tmp_path), "--env", "sokoban"])
