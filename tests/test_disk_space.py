"""No room on the disk: SFT and RL say so before the work when one save cannot fit, and
a save that runs out of space mid-write leaves no weights that would load wrong.

Checkpoint saves that fail mid-write are covered in tests/test_checkpoint_disk_full.py;
here: the checks before the work (``ragen.disk_space.require_free``), the SFT model's
save, and the helpers' arithmetic."""

import errno
from collections import namedtuple

import pytest
import torch
from test_trainer_train import _overrides

import ragen.disk_space as disk_space
from ragen.agent.rollout import RolloutConfig
from ragen.cli import main
from ragen.errors import DiskFullError, RunDirError
from ragen.sft.config import SFTConfig
from ragen.sft.trainer import run_sft

Usage = namedtuple("Usage", "total used free")


def _free(monkeypatch, free):
    monkeypatch.setattr(disk_space.shutil, "disk_usage", lambda _: Usage(0, 0, free))


def _sft_cfg():
    return SFTConfig(env="bandit", rollout=RolloutConfig(max_turns=1), episodes=4, epochs=1)


def test_state_bytes_counts_tied_weights_once_and_adam_two_fp32_moments():
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight  # tied, as a small LM's input and output embeddings
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    assert disk_space.state_bytes(model) == 10 * 4 * 4
    emb.weight.requires_grad_(False)
    assert disk_space.adam_state_bytes(torch.nn.Linear(3, 2)) == 2 * (6 + 2) * 4
    assert disk_space.adam_state_bytes(model) == 0  # nothing trainable, no moments


def test_is_disk_full_reads_the_errno_or_a_hidden_write_failure_with_little_free(
    tmp_path, monkeypatch
):
    assert disk_space.is_disk_full(OSError(errno.ENOSPC, "No space"), tmp_path, 1)
    wrapped = RuntimeError("save failed")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert disk_space.is_disk_full(wrapped, tmp_path, 1)
    hidden = RuntimeError("Error while serializing: I/O error: (os error 28)")
    _free(monkeypatch, 100)
    assert disk_space.is_disk_full(hidden, tmp_path, 1000)
    assert not disk_space.is_disk_full(hidden, tmp_path, 10)  # room enough: another fault
    assert not disk_space.is_disk_full(ValueError("bad shape"), tmp_path, 1000)


def test_free_bytes_looks_at_the_nearest_existing_folder(tmp_path):
    assert disk_space.free_bytes(tmp_path / "not" / "yet" / "made") == disk_space.free_bytes(
        tmp_path
    )


def test_sft_stops_before_the_expert_data_when_the_model_cannot_be_saved(
    tiny_model_dir, tmp_path, monkeypatch
):
    import ragen.sft.trainer as sft

    def never(*args, **kwargs):
        raise AssertionError("expert data generated although the model cannot be saved")

    monkeypatch.setattr(sft, "make_expert_data", never)
    _free(monkeypatch, 5_000)
    with pytest.raises(DiskFullError) as info:
        run_sft(tiny_model_dir, tmp_path / "sft", _sft_cfg(), log=lambda *_: None)
    message = str(info.value)
    assert "not enough disk space for the SFT model in" in message
    assert "0.01 MB free; stopped before any work. Fix: free space" in message
    assert isinstance(info.value, RunDirError) and isinstance(info.value, OSError)


def test_sft_save_that_fills_the_disk_leaves_no_partial_weights(
    tiny_model_dir, tmp_path, monkeypatch
):
    import ragen.sft.trainer as sft

    real_train = sft.train_sft

    def train_then_fill_the_disk(model, *args, **kwargs):
        history = real_train(model, *args, **kwargs)

        def save_pretrained(folder, **kw):  # what safetensors does on a full disk
            (tmp_path / "sft" / "model.safetensors").write_bytes(b"half a file")
            raise RuntimeError("Error while serializing: I/O error: (os error 28)")

        model.save_pretrained = save_pretrained
        _free(monkeypatch, 1_000)
        return history

    monkeypatch.setattr(sft, "train_sft", train_then_fill_the_disk)
    with pytest.raises(DiskFullError) as info:
        run_sft(tiny_model_dir, tmp_path / "sft", _sft_cfg(), log=lambda *_: None)
    assert "disk full while saving the SFT model to" in str(info.value)
    assert "the trained weights were not written" in str(info.value)
    assert not list((tmp_path / "sft").glob("model*.safetensors*"))


def test_rl_run_with_checkpoints_stops_before_the_first_step_without_room(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    run = tmp_path / "run"
    args = _overrides(tiny_model_dir, run, "bandit", "grpo", steps=1)
    _free(monkeypatch, 10_000)
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("ragen train: error:")]
    assert "not enough disk space for one checkpoint (trainer.save_every=2)" in line
    assert "point trainer.run_dir at a disk with room" in line
    assert not (run / "metrics.jsonl").exists()  # no step ran


def test_rl_run_saving_only_at_the_end_checks_the_room_before_the_first_step(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    """Issue 55: trainer.save_every=0 still saves the last step, but the check before the
    first step was skipped (and the message recommended save_every=0 as the way out): on
    a full disk every step trained, then the final save failed and all was lost."""
    run = tmp_path / "run"
    args = _overrides(tiny_model_dir, run, "bandit", "grpo", steps=1)
    _free(monkeypatch, 10_000)
    assert main(["train", *args, "trainer.save_every=0"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("ragen train: error:")]
    assert (
        "not enough disk space for one checkpoint (trainer.save_every=0; 0 still saves the last step)"
        in line
    )
    assert "save_every=0 (no" not in line  # no way out that is none
    assert not (run / "metrics.jsonl").exists()  # no step ran
