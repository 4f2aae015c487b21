"""`ragen eval` in the first hour: a run's rollout settings, progress, seed-offset checks."""

from __future__ import annotations

import io
import json

import pytest

from ragen.agent.evaluate import MAX_VALIDATION_SEEDS, Progress, find_training_run
from ragen.cli import main
from ragen.errors import UsageError


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory):
    """A 1-step training run with max_new_tokens=8 and the compact prompt style."""
    run = tmp_path_factory.mktemp("run") / "bandit-run"
    overrides = [
        "env=bandit",
        "algo=grpo",
        f"model.path={tiny_model_dir}",
        "rollout.env_groups=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=8",
        "rollout.prompt_style=compact",
        "rollout.max_model_len=1024",
        "algo.ppo_mini_batch_size=2",
        "trainer.total_steps=1",
        "trainer.val_every=0",
        "trainer.save_every=1",
        "trainer.console=false",
        f"trainer.run_dir={run}",
    ]
    assert main(["train", *overrides]) == 0
    return run


def _eval(model, out, *extra):
    return main(
        ["eval", "--model", str(model), "--env", "bandit", "--n", "2", "--out", str(out), *extra]
    )


def _rollout(out):
    return json.loads((out / "metrics.json").read_text())["settings"]["rollout"]


def test_eval_uses_the_runs_rollout_settings(run_dir, tmp_path, capsys):
    actor = run_dir / "checkpoints" / "step_000001" / "actor"
    assert _eval(actor, tmp_path / "a") == 0
    err = capsys.readouterr().err
    assert "using the run's rollout settings" in err
    assert "max_new_tokens=8" in err and "prompt_style=compact" in err
    rollout = _rollout(tmp_path / "a")
    assert rollout["max_new_tokens"] == 8 and rollout["prompt_style"] == "compact"
    assert rollout["temperature"] == 0.5  # sampling stays the evaluator's


def test_flags_given_win_over_the_run(run_dir, tmp_path, capsys):
    assert _eval(run_dir, tmp_path / "b", "--max-new-tokens", "16", "--prompt-style", "full") == 0
    err = capsys.readouterr().err
    assert "max_new_tokens" not in err and "prompt_style" not in err
    rollout = _rollout(tmp_path / "b")
    assert rollout["max_new_tokens"] == 16 and rollout["prompt_style"] == "full"


def test_run_and_step_folders_resolve_to_the_newest_actor(run_dir):
    actor = run_dir / "checkpoints" / "step_000001" / "actor"
    for given in (run_dir, actor.parent, actor):
        found = find_training_run(str(given))
        assert found is not None and found.model == str(actor)
    assert find_training_run("oracle") is None


def test_plain_model_keeps_the_defaults(tiny_model_dir, tmp_path, capsys):
    assert find_training_run(tiny_model_dir) is None
    assert _eval(tiny_model_dir, tmp_path / "c", "--max-turns", "1") == 0
    assert "run's rollout settings" not in capsys.readouterr().err
    assert _rollout(tmp_path / "c")["max_new_tokens"] == 400


def test_run_without_checkpoints_is_one_line(tmp_path, capsys):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    assert _eval(tmp_path / "run", tmp_path / "d") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ragen eval: error: run folder") and len(err.splitlines()) == 1


@pytest.mark.parametrize("offset", ["-1", str(MAX_VALIDATION_SEEDS)])
def test_bad_seed_offset_is_one_line(offset, capsys):
    args = ["eval", "--model", "oracle", "--env", "bandit", "--n", "4", "--seed-offset", offset]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ragen eval: error: --seed-offset") and len(err.splitlines()) == 1


def test_progress_lines_only_for_long_runs():
    now = [0.0]
    out = io.StringIO()
    progress = Progress(min_seconds=5.0, stream=out, clock=lambda: now[0])
    now[0] = 2.0
    assert progress(64, 256) is None  # young run: silent
    now[0] = 30.0
    assert progress(128, 256) == "eval: 128/256 episodes  elapsed 0:30  eta 0:30"
    now[0] = 60.0
    assert progress(256, 256) is None  # the last batch: the table follows
    assert out.getvalue().splitlines() == ["eval: 128/256 episodes  elapsed 0:30  eta 0:30"]


def test_progress_is_called_per_batch():
    from ragen.agent.evaluate import run_evaluation

    calls = []
    run_evaluation(
        "oracle", "bandit", n=6, batch_groups=2, progress=lambda d, t: calls.append((d, t))
    )
    assert calls == [(2, 6), (4, 6), (6, 6)]
    with pytest.raises(UsageError):
        run_evaluation("oracle", "bandit", n=2, seed_offset=-3)
