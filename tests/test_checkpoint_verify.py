"""Every load of a checkpoint's model verifies it against the manifest; damaged safetensors
files anywhere are one-line errors (``ragen.checkpoint_verify``)."""

import shutil

import pytest
from test_trainer_train import _overrides

from ragen.checkpoint_verify import safetensors_problem, verify_model_folder
from ragen.cli import main
from ragen.errors import CheckpointError, ModelLoadError

EVAL = ["--env", "bandit", "--n", "2", "--max-new-tokens", "4", "--device", "cpu"]


@pytest.fixture(scope="module")
def run_with_two_checkpoints(tiny_model_dir, tmp_path_factory):
    """A bandit run with checkpoints at steps 1 and 2 (copied per test before damaging)."""
    run = tmp_path_factory.mktemp("verify") / "run"
    extra = ["trainer.save_every=1", "trainer.val_every=0"]
    args = _overrides(tiny_model_dir, run, "bandit", "grpo", steps=2, extra=extra)
    assert main(["train", *args]) == 0
    return run


@pytest.fixture()
def run(run_with_two_checkpoints, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_with_two_checkpoints, copy)
    return copy


def _flip_bytes(file, n=10):
    data = bytearray(file.read_bytes())
    for i in range(n):
        data[len(data) // 2 + i] ^= 0xFF
    file.write_bytes(bytes(data))


def _one_line_error(capsys):
    """The one error line (eval may first say which run settings it uses)."""
    err = capsys.readouterr().err.strip()
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def test_eval_refuses_a_checkpoint_with_flipped_bytes(run, capsys):
    actor = run / "checkpoints" / "step_000002" / "actor"
    _flip_bytes(actor / "model.safetensors")
    assert main(["eval", "--model", str(actor), *EVAL]) == 2
    err = _one_line_error(capsys)
    assert "model.safetensors" in err and "sha256" in err
    # the fix names the earlier checkpoint's actor, which itself still evaluates
    earlier = run / "checkpoints" / "step_000001"
    assert str(earlier / "actor") in err and f"trainer.resume={earlier}" in err
    assert main(["eval", "--model", str(earlier / "actor"), *EVAL]) == 0


def test_eval_refuses_a_truncated_checkpoint_file(run, capsys):
    weights = run / "checkpoints" / "step_000001" / "actor" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert main(["eval", "--model", str(weights.parent), *EVAL]) == 2
    err = _one_line_error(capsys)
    assert "model.safetensors" in err and "no earlier checkpoint" in err


def test_truncated_safetensors_outside_a_checkpoint_is_one_line(tiny_model_dir, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    assert main(["eval", "--model", str(folder), *EVAL]) == 2
    err = _one_line_error(capsys)
    assert str(weights) in err and "truncated" in err
    with pytest.raises(ModelLoadError):
        verify_model_folder(folder)


def test_train_from_a_corrupt_checkpoint_model_is_refused(run, tiny_model_dir, tmp_path, capsys):
    """``model.path=RUN/checkpoints/step_N/actor`` (fine-tuning from a checkpoint) verifies too."""
    actor = run / "checkpoints" / "step_000002" / "actor"
    _flip_bytes(actor / "model.safetensors")
    args = _overrides(str(actor), tmp_path / "next", "bandit", "grpo", steps=1)
    assert main(["train", *args]) == 2
    assert "step_000001" in _one_line_error(capsys)


def test_plain_folders_and_intact_checkpoints_pass(run, tiny_model_dir):
    verify_model_folder(tiny_model_dir)  # no manifest: only the header check
    verify_model_folder(run / "checkpoints" / "step_000002" / "actor")
    assert (
        safetensors_problem(run / "checkpoints" / "step_000002" / "actor" / "model.safetensors")
        is None
    )
    (run / "checkpoints" / "step_000002" / "actor" / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="config.json"):
        verify_model_folder(run / "checkpoints" / "step_000002" / "actor")
