"""The grid study's tools: which checkpoint ``eval_checkpoints`` evaluates, results.json
shared by two sweeps, ``repeat_check`` (one RL step run twice gives the same numbers),
and a clear stop when the results folder holds no warm start."""

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


def test_a_shared_warm_start_is_seed_zeros_for_every_seed(tmp_path, monkeypatch):
    """With ``sft.shared`` the study trains seed 1's RL from seed 0's warm start; the
    evaluator reads it there and seed 1's own RL variants beside it."""
    import experiments.grids.eval_checkpoints as tool

    warm = tmp_path / "sokoban" / "seed0" / "sft"
    warm.mkdir(parents=True)
    (warm / "config.json").write_text("{}")
    _checkpoint(tmp_path / "sokoban" / "seed1" / "lr1e-5", 20)
    seen = []

    def heldout(cfg, env, path):
        seen.append(path)
        return {"success_rate": 0.5}

    monkeypatch.setattr(tool, "heldout_success", heldout)
    args = ["--config", "tiny-cpu", "--out", str(tmp_path), "--env", "sokoban", "--seed", "1"]
    main([*args, "sft.shared=true"])
    assert seen == [str(warm), str(tmp_path / "sokoban/seed1/lr1e-5/checkpoints/step_000020/actor")]
    with pytest.raises(SystemExit, match="no warm start in .*sokoban/seed1/sft"):
        main(args)  # not shared: seed 1 needs its own


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


def test_the_repeat_check_stops_with_a_fix_without_a_warm_start(tmp_path):
    from experiments.grids.repeat_check import main as repeat_check

    with pytest.raises(SystemExit, match="no warm start in .*sokoban/seed0/sft. Fix: point --out"):
        repeat_check(
            ["--config", "tiny-cpu", "--out", str(tmp_path), "--env", "sokoban", "--budgets", "512"]
        )


def test_one_rl_step_repeats_to_the_last_digit_at_one_budget(tiny_model_dir, tmp_path, capsys):
    import shutil

    from experiments.grids.repeat_check import main as repeat_check

    shutil.copytree(tiny_model_dir, tmp_path / "sokoban" / "seed0" / "sft")
    args = ["--config", "tiny-cpu", "--out", str(tmp_path), "--env", "sokoban"]
    small = ["rl.env_groups=2", "rl.group_size=2", "rl.algo=drgrpo", "rl.mini_batch_size=8"]
    small += ["max_new_tokens=8", "rl.variants={base: []}"]
    assert repeat_check([*args, "--budgets", "256,256", *small]) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if " | " in line]
    assert rows[0] == ["metric", "budget 256", "budget 256"]
    assert len(rows) > 5 and all(r[1] == r[2] for r in rows[1:])


def test_the_eval_phase_evaluates_a_trained_run_without_training_it(tmp_path, monkeypatch):
    """``--phase eval``: a run whose evaluation was lost (its process killed after RL)
    gets every saved checkpoint evaluated and its row written, its training untouched."""
    import json

    import experiments.grids.run as study

    run = tmp_path / "sokoban" / "seed0" / "control"
    for step in (20, 40):
        _checkpoint(run, step)
    steps = [{"step": k, "timing/step": 2.0, "rollout/success_rate": 0.25} for k in range(1, 41)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    seen = []

    def heldout(cfg, env, path):
        seen.append(path)
        return {"success_rate": 0.5 if "000020" in path else 0.75}

    monkeypatch.setattr(study, "heldout_success", heldout)
    monkeypatch.setattr(study, "rl_job", lambda *a: pytest.fail("--phase eval trained"))
    args = ["--config", "tiny-cpu", "--out", str(tmp_path), "--phase", "eval"]
    assert study.main([*args, "envs=[sokoban]", "seeds=[0]", "rl.variants={control: []}"]) == 0
    row = json.loads((tmp_path / "results.json").read_text())["sokoban"]["0"]["control"]
    assert seen[0].endswith("step_000040/actor") and len(seen) == 2
    assert row["heldout_by_step"] == {"20": 0.5, "40": 0.75} and row["success_rate"] == 0.75
    assert row["steps"] == 40 and row["rl_seconds"] == 80.0  # the steps' own timing
