"""NaN and inf never pass silently.

Every float config key rejects NaN/inf at load (the issue's inputs replayed one by one,
then every float key of the config tree); a NaN loss or gradient stops the step before
the optimizer touches the weights and leaves the step's data behind; saving and loading
refuse non-finite weights."""

import dataclasses
import json

import pytest
import torch
from test_trainer_train import _overrides

from ragen.cli import main
from ragen.errors import ConfigError, NonFiniteError
from ragen.trainer.config import TrainConfig, load_config
from ragen.trainer.starpo import StarPOTrainer


def _one_line(err, command):
    assert "Traceback" not in err, err
    (line,) = [x for x in err.splitlines() if x.startswith(f"ragen {command}: error:")]
    return line


# ------------------------------------------------------------------------------ at load
ISSUE_INPUTS = [
    "model.actor_lr=inf",
    "model.actor_lr=nan",
    "algo.kl_coef=nan",
    "algo.entropy_coef=inf",
    "algo.clip_ratio_low=nan",
    "algo.clip_ratio_c=nan",
    "rollout.temperature=nan",
    "algo.grad_clip=nan",
    "algo.grad_clip=-1",
]


@pytest.mark.parametrize("override", ISSUE_INPUTS)
def test_the_issues_non_finite_train_keys_fail_at_load(override, capsys):
    assert main(["train", override, "--print-config"]) == 2
    line = _one_line(capsys.readouterr().err, "train")
    key = override.split("=")[0]
    assert f"error: {key}:" in line and "Fix:" in line


def _float_keys(node, prefix=""):
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            yield from _float_keys(value, f"{prefix}{f.name}.")
        elif f.type in ("float", "float | None"):
            yield f"{prefix}{f.name}"


ALL_FLOAT_KEYS = list(_float_keys(TrainConfig()))


def test_the_config_has_the_float_keys_the_issue_names():
    assert len(ALL_FLOAT_KEYS) > 30
    for key in ("model.actor_lr", "algo.kl_coef", "algo.grad_clip", "rollout.temperature"):
        assert key in ALL_FLOAT_KEYS


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_float_key_rejects_non_finite_values(value):
    for key in ALL_FLOAT_KEYS:
        with pytest.raises(ConfigError, match=rf"^{key}: must be a finite number, got"):
            load_config([f"{key}={value}"])


@pytest.mark.parametrize("lr", ["inf", "nan", "0", "-1e-3"])
def test_sft_lr_must_be_a_finite_positive_number(tmp_path, lr, capsys):
    assert main(["sft", "--out", str(tmp_path / "sft"), "--episodes", "2", f"--lr={lr}"]) == 2
    assert "error: lr: the learning rate must be a finite number > 0" in _one_line(
        capsys.readouterr().err, "sft"
    )
    assert not (tmp_path / "sft").exists()  # refused before anything was written


# ------------------------------------------------------------------------------ at run time
def _trainer(model_dir, run, *extra):
    args = _overrides(model_dir, run, "bandit", "grpo", steps=2, extra=["model.device=cpu", *extra])
    return StarPOTrainer(load_config(args), argv=args)


def _snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _check_stopped_before_the_optimizer(trainer, before, run, what):
    after = trainer.actor.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # not one weight moved
    assert not trainer.actor_opt.state  # AdamW never stepped
    folder = run / "nonfinite" / "step_000001"
    report = json.loads((folder / "report.json").read_text())
    assert report["step"] == 1 and what in report["what"]
    batch = torch.load(folder / "batch.pt", weights_only=True)  # plain tensors
    assert batch["input_ids"].shape == batch["advantages"].shape
    assert not (run / "checkpoints").exists() or not list((run / "checkpoints").iterdir())


def test_a_nan_gradient_stops_the_step_before_the_optimizer(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    trainer = _trainer(tiny_model_dir, run)
    before = _snapshot(trainer.actor)
    param = next(p for p in trainer.actor.parameters() if p.requires_grad)
    param.register_hook(lambda g: g * float("nan"))  # the backward pass yields NaN
    with pytest.raises(NonFiniteError) as info:
        trainer.train()
    message = str(info.value)
    assert message.startswith("step 1: the actor's gradient norm is nan, so the run stops")
    assert str(run / "nonfinite" / "step_000001") in message
    assert "Fix: lower model.actor_lr" in message and "trainer.resume=auto" in message
    _check_stopped_before_the_optimizer(trainer, before, run, "gradient norm is nan")


def test_a_nan_loss_stops_the_step_and_is_named(tiny_model_dir, tmp_path, monkeypatch, capsys):
    from ragen.algo import registry

    real = registry.get_policy_loss("ppo")

    def nan_loss(**kwargs):
        loss, metrics = real(**kwargs)
        return loss * float("nan"), metrics

    # a registered loss, selected by algo.policy_loss, as a user's own would be
    monkeypatch.setitem(
        registry._POLICY_LOSSES, "nan_ppo", dataclasses.replace(real, name="nan_ppo", fn=nan_loss)
    )
    run = tmp_path / "run"
    extra = ["model.device=cpu", "algo.policy_loss=nan_ppo"]
    args = _overrides(tiny_model_dir, run, "bandit", "grpo", steps=2, extra=extra)
    assert main(["train", *args]) == 2
    line = _one_line(capsys.readouterr().err, "train")
    assert "step 1: the actor loss is nan, so the run stops before that optimizer step" in line
    assert (run / "nonfinite" / "step_000001" / "batch.pt").is_file()


def test_saving_refuses_non_finite_weights(tiny_model_dir, tmp_path):
    trainer = _trainer(tiny_model_dir, tmp_path / "run")
    with torch.no_grad():
        next(trainer.actor.parameters()).fill_(float("inf"))
    with pytest.raises(
        NonFiniteError, match=r"refusing to save checkpoint .*step_000001: the actor"
    ):
        trainer.save_checkpoint(1)
    assert not list((tmp_path / "run" / "checkpoints").glob("step_*"))  # no .tmp either
    trainer.close()


def test_loading_refuses_non_finite_weights(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """What `actor_lr=inf` used to leave behind: a checkpoint of NaN weights, which
    `ragen eval` played and reported as a normal table, and a resume continued from."""
    import ragen.trainer.checkpoint

    run = tmp_path / "run"
    trainer = _trainer(tiny_model_dir, run)
    with torch.no_grad():
        for p in trainer.actor.parameters():
            p.fill_(float("nan"))
    # written as a diverged run of an older version did (the save check bypassed)
    monkeypatch.setattr(ragen.trainer.checkpoint, "check_finite_weights", lambda *a, **k: None)
    path = trainer.save_checkpoint(2)
    trainer.close()
    monkeypatch.undo()

    assert main(["eval", "--model", str(path), "--env", "bandit", "--n", "2"]) == 2
    line = _one_line(capsys.readouterr().err, "eval")
    assert "weight tensors hold NaN or inf" in line and "earlier checkpoint" in line

    fresh = _trainer(tiny_model_dir, tmp_path / "other")
    with pytest.raises(NonFiniteError, match="tensors hold NaN or inf"):
        fresh.checkpoints.load(path, actor=fresh.actor)
    fresh.close()


def test_sft_stops_on_a_nan_loss_before_the_optimizer(tiny_model_dir, tmp_path, monkeypatch):
    import ragen.sft.trainer as sft
    from ragen.models import load_policy
    from ragen.sft.config import SFTConfig
    from ragen.sft.expert_data import make_expert_data

    model, tok = load_policy(tiny_model_dir, device="cpu", dtype=torch.float32)
    cfg = SFTConfig(env="sokoban", episodes=2, epochs=1, batch_size=2)
    data = make_expert_data(tok, cfg)
    before = _snapshot(model)
    real = sft.sft_loss
    monkeypatch.setattr(sft, "sft_loss", lambda *a: (real(*a)[0] * float("inf"), None))
    with pytest.raises(NonFiniteError, match=r"^sft step 1: the SFT loss is inf, so training"):
        sft.train_sft(model, tok, data, cfg, log=lambda _: None, dump_dir=tmp_path)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert (tmp_path / "nonfinite" / "step_000001" / "batch.pt").is_file()
