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


def test_two_sweeps_into_one_folder_keep_each_others_rows(tmp_path):
    """Two study processes started side by side (other variants from the same warm start)
    each load results.json once; every write must keep what the other added since."""
    import json

    from experiments.grids.config import StudyConfig
    from experiments.grids.run import Results

    first, second = Results(tmp_path, StudyConfig()), Results(tmp_path, StudyConfig())
    first.add({"env": "sokoban", "seed": 0, "warm": {"success_rate": 0.5}})
    second.add({"env": "sokoban", "seed": 0, "variant": "fp32", "fp32": {"success_rate": 0.6}})
    first.add({"env": "sokoban", "seed": 0, "variant": "lr", "lr": {"success_rate": 0.7}})
    row = json.loads((tmp_path / "results.json").read_text())["sokoban"]["0"]
    assert row == {
        "warm": {"success_rate": 0.5},
        "fp32": {"success_rate": 0.6},
        "lr": {"success_rate": 0.7},
    }
