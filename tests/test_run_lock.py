"""Two trainings on one trainer.run_dir (the second used to replace the first's config and
metrics). The second is refused with one line naming the holder, before it writes
anything; a lock left by a dead process (``kill -9``) never blocks."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import child_env
from test_trainer_train import _overrides

from ragen.cli import main
from ragen.errors import RunDirError
from ragen.run_layout import LOCK_FILE, RunLock

REPO = Path(__file__).resolve().parents[1]


def test_a_held_run_dir_is_refused_naming_the_holder(tmp_path):
    first = RunLock(tmp_path / "run").acquire()
    info = json.loads((tmp_path / "run" / LOCK_FILE).read_text())
    assert info["pid"] == os.getpid()
    with pytest.raises(RunDirError, match=rf"is in use by another training \(pid {os.getpid()} "):
        RunLock(tmp_path / "run").acquire()
    first.release()
    RunLock(tmp_path / "run").acquire().release()  # free again once released


def _hold_lock_in_a_child(run: Path) -> subprocess.Popen:
    code = (
        "import sys, time; from ragen.run_layout import RunLock; "
        f"lock = RunLock({str(run)!r}).acquire(); print('held', flush=True); time.sleep(600)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=child_env(REPO), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_of_a_killed_process_does_not_block(tmp_path):
    run = tmp_path / "run"
    proc = _hold_lock_in_a_child(run)
    with pytest.raises(RunDirError, match=f"pid {proc.pid} "):
        RunLock(run).acquire()
    proc.kill()  # SIGKILL: no cleanup code runs; the kernel drops the flock
    proc.wait(timeout=30)
    assert (run / LOCK_FILE).is_file()  # the file stays, the lock does not
    RunLock(run).acquire().release()


def test_a_second_training_on_the_same_run_dir_is_refused(tiny_model_dir, tmp_path, capsys):
    """The issue's input: a training runs; a second `ragen train` with the same
    trainer.run_dir starts. It must not touch the first run's config.yaml or metrics."""
    run = tmp_path / "run"
    args = _overrides(
        tiny_model_dir, run, "bandit", "grpo", steps=500,
        extra=["trainer.save_every=1000", "trainer.val_every=0"],
    )  # fmt: skip
    first = subprocess.Popen(
        [sys.executable, "-m", "ragen.cli", "train", *args],
        cwd=REPO,
        env=child_env(REPO, OMP_NUM_THREADS="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        metrics = run / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while not (metrics.is_file() and metrics.read_text().strip()):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first training logged no step"
            time.sleep(0.1)
        config = (run / "config.yaml").read_text()
        config_mtime = (run / "config.yaml").stat().st_mtime_ns
        assert main(["train", *args, "trainer.total_steps=3"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        (line,) = [x for x in err.splitlines() if x.startswith("ragen train: error:")]
        assert f"trainer.run_dir {run} is in use by another training (pid {first.pid} " in line
        assert "ragen train" in line and "Fix:" in line
        assert (run / "config.yaml").read_text() == config
        assert (run / "config.yaml").stat().st_mtime_ns == config_mtime
        assert first.poll() is None  # the first run goes on
        logged = metrics.read_text()
        time.sleep(1.0)
        assert metrics.read_text().startswith(logged)  # and keeps its metrics
    finally:
        first.kill()
        first.communicate()
