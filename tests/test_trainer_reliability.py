"""Resuming from an earlier checkpoint, runs that train nothing, validation trajectories,
and SIGINT/SIGTERM with a real signal to a real ``ragen train`` process."""

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from fakes import child_env
from test_trainer_train import _metric_lines, _overrides, _weights

from ragen.cli import main
from ragen.trainer.checkpoint import CheckpointManager
from ragen.trainer.metrics_logger import read_metrics

REPO = Path(__file__).resolve().parents[1]


def _steps(run):
    return [m["step"] for m in read_metrics(run)]


def _one_line(err):
    """The single ``ragen train: error:`` line (other stderr lines are progress notes)."""
    assert "Traceback" not in err, err
    (line,) = [x for x in err.splitlines() if x.startswith("ragen train: error:")]
    return line


def test_resume_from_an_earlier_checkpoint_supersedes_the_later_ones(
    tiny_model_dir, tmp_path, capsys
):
    run = tmp_path / "run"
    every_step = ["trainer.save_every=1", "trainer.val_every=0"]
    args = _overrides(tiny_model_dir, run, "bandit", "grpo", steps=3, extra=every_step)
    assert main(["train", *args]) == 0
    uninterrupted = _weights(run / "checkpoints/step_000003/actor")
    lines_before = _metric_lines(run)
    capsys.readouterr()

    step1 = run / "checkpoints" / "step_000001"
    assert main(["train", *args, f"trainer.resume={step1}"]) == 0
    out = capsys.readouterr().out
    assert "moved the later checkpoints (step_000002, step_000003)" in out

    assert _steps(run) == [1, 2, 3]  # each step exactly once
    assert _metric_lines(run) == lines_before  # deterministic: the same steps again
    (superseded,) = (run / "superseded").iterdir()
    assert str(superseded) in out
    for step in (2, 3):  # kept, not deleted
        CheckpointManager(run).verify(superseded / "checkpoints" / f"step_00000{step}")
        assert (superseded / "trajectories" / f"step_00000{step}.jsonl").is_file()
    assert [m["step"] for m in read_metrics(superseded)] == [2, 3]
    resumed = _weights(run / "checkpoints/step_000003/actor")
    assert all(torch.equal(uninterrupted[k], resumed[k]) for k in uninterrupted)


def test_context_overflow_on_every_step_stops_with_one_line(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "overflow"
    extra = [
        "rollout.max_model_len=40",
        "trainer.max_consecutive_skipped_steps=2",
        "trainer.save_every=1",
        "trainer.console=true",  # plain lines (not a terminal), with the truncation rates
    ]
    args = _overrides(tiny_model_dir, run, "sokoban", "grpo", steps=5, extra=extra)
    assert main(["train", *args]) == 2
    captured = capsys.readouterr()
    err = _one_line(captured.err)
    assert "2 consecutive steps trained nothing" in err and "rollout.max_model_len" in err
    assert _steps(run) == [1, 2]
    assert not list((run / "checkpoints").glob("step_*"))  # nothing trained: nothing saved
    assert "no checkpoint written" in captured.out
    # the console line shows the truncation rates
    assert "ctx_trunc 1" in captured.out and "env_trunc 0" in captured.out


def test_a_filter_that_keeps_nothing_stops_with_one_line(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "filtered"
    extra = [
        "algo.filter.strategy=min_std",
        "algo.filter.value=100",
        "trainer.max_consecutive_skipped_steps=2",
    ]
    args = _overrides(tiny_model_dir, run, "bandit", "starpo-s", steps=4, extra=extra)
    assert main(["train", *args]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "filter" in err and "algo.filter.value" in err
    assert _steps(run) == [1, 2]


def test_validation_trajectories_are_saved_beside_the_training_ones(tiny_model_dir, tmp_path):
    run = tmp_path / "val"
    args = _overrides(tiny_model_dir, run, "bandit", "grpo", steps=2)  # val_every=2, 2 groups
    assert main(["train", *args]) == 0
    names = sorted(p.name for p in (run / "trajectories").iterdir())
    assert names == ["step_000001.jsonl", "step_000002.jsonl", "val_step_000002.jsonl"]
    records = (run / "trajectories" / "val_step_000002.jsonl").read_text().splitlines()
    assert len(records) == 2 and all(json.loads(r)["turns"] for r in records)


# ------------------------------------------------------------------------------ signals
def _start_training(tiny_model_dir, run):
    args = _overrides(
        tiny_model_dir,
        run,
        "bandit",
        "grpo",
        steps=500,
        extra=["trainer.save_every=1000", "trainer.val_every=0"],
    )
    env = child_env(REPO, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragen.cli", "train", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.is_file() and metrics.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"training did not log a step: {proc.communicate()}")
        time.sleep(0.1)
    return proc


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_saves_the_last_step_and_prints_the_resume_command(
    tiny_model_dir, tmp_path, sig, code
):
    run = tmp_path / "run"
    proc = _start_training(tiny_model_dir, run)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    last = _steps(run)[-1]
    assert _steps(run) == list(range(1, last + 1))
    manager = CheckpointManager(run)
    assert manager.latest() == run / "checkpoints" / f"step_{last:06d}"  # verifies too
    (line,) = [x for x in err.splitlines() if "To resume: " in x]
    command = shlex.split(line.split("To resume: ", 1)[1])
    assert command[:2] == ["ragen", "train"] and command[-1] == "trainer.resume=auto"
    # the printed command continues the run (here to one more step, to stay fast)
    assert main([*command[1:], f"trainer.total_steps={last + 1}"]) == 0
    assert _steps(run) == list(range(1, last + 2))
