"""The run folder's disk fills up while a checkpoint is saved.

The disk is filled by making the checkpoint writer fail as a full disk makes it fail:
``OSError(ENOSPC)`` from Python's writers, or torch's ``RuntimeError("basic_ios::clear:
iostream error")``, which hides the errno. Expected: one line saying "disk full while
saving step N (needed ~X MB)", the previous checkpoint intact, and the resume command,
which then works."""

import errno
import re
import shlex
from collections import namedtuple

import pytest
import torch
from test_trainer_train import _overrides

import ragen.trainer.checkpoint as checkpoint
from ragen.cli import main
from ragen.trainer.checkpoint import CheckpointManager, DiskFullError
from ragen.trainer.metrics_logger import read_metrics


def _fail_saving_step(monkeypatch, step, error):
    """torch.save raises ``error`` while writing ``step_<step>``'s files."""
    real = torch.save

    def save(obj, f, *args, **kwargs):
        if f"step_{step:06d}" in str(f):
            raise error
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "save", save)


def test_disk_full_during_a_save_keeps_the_last_checkpoint_and_prints_the_resume_command(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    run = tmp_path / "run"
    extra = ["trainer.save_every=1", "trainer.val_every=0"]
    args = _overrides(tiny_model_dir, run, "bandit", "grpo", steps=2, extra=extra)
    _fail_saving_step(monkeypatch, 2, OSError(errno.ENOSPC, "No space left on device"))
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("ragen train: error:")]
    assert "disk full while saving step 2 to" in line and "(needed ~" in line
    previous = run / "checkpoints" / "step_000001"
    assert f"the previous checkpoint {previous} is intact" in line
    manager = CheckpointManager(run)
    assert manager.latest() == previous  # verified against its manifest
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step_000001"]  # no .tmp

    monkeypatch.undo()  # space freed: the printed command resumes the run
    command = shlex.split(line.split("To resume: ", 1)[1])
    assert command[:2] == ["ragen", "train"] and command[-1] == "trainer.resume=auto"
    assert main(command[1:]) == 0
    assert [m["step"] for m in read_metrics(run)] == [1, 2]
    assert manager.latest() == run / "checkpoints" / "step_000002"


Usage = namedtuple("Usage", "total used free")


@pytest.mark.parametrize(
    ("free", "disk_full"), [(10_000, True), (10**15, False)], ids=["little-free", "space-left"]
)
def test_torchs_iostream_error_counts_as_disk_full_only_when_space_is_short(
    tiny_model_dir, tmp_path, monkeypatch, free, disk_full
):
    from ragen.models import load_policy

    model, tok = load_policy(tiny_model_dir, device="cpu", dtype=torch.float32)
    manager = CheckpointManager(tmp_path / "run")
    manager.save(1, actor=model)
    _fail_saving_step(monkeypatch, 2, RuntimeError("basic_ios::clear: iostream error"))
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda _: Usage(0, 0, free))
    expected = DiskFullError if disk_full else RuntimeError
    with pytest.raises(expected) as info:
        manager.save(2, actor=model, optimizers={})
    if disk_full:
        weights = sum(t.numel() * t.element_size() for t in model.state_dict().values()) / 1e6
        needed = float(re.search(r"needed ~([\d,.]+) MB", str(info.value))[1].replace(",", ""))
        assert weights - 0.5 <= needed <= weights + 2  # the weights, plus small files
        assert "0.01 MB free" in str(info.value)
    assert manager.list() == [tmp_path / "run" / "checkpoints" / "step_000001"]
    manager.verify(manager.list()[0])
