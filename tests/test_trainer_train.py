"""`ragen train` end to end with a nano model: every env x algorithm family, resume, determinism."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ragen.cli import main
from ragen.trainer.config import load_config
from ragen.trainer.starpo import StarPOTrainer


def _overrides(model_dir, run_dir, env, algo, steps=2, extra=()):
    return [
        f"env={env}",
        f"algo={algo}",
        f"model.path={model_dir}",
        "model.actor_lr=1e-3",
        "model.critic_lr=1e-3",
        "rollout.env_groups=2",
        "rollout.group_size=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=12",
        "rollout.max_model_len=1024",
        "algo.ppo_mini_batch_size=2",
        "algo.filter.value=0.5" if algo == "starpo-s" else "algo.filter.value=1.0",
        f"trainer.total_steps={steps}",
        "trainer.val_every=2",
        "trainer.val_groups=2",
        "trainer.save_every=2",
        "trainer.console=false",
        f"trainer.run_dir={run_dir}",
        *extra,
    ]


def _weights(folder):
    return load_file(str(Path(folder) / "model.safetensors"))


@pytest.mark.parametrize("env", ["bandit", "sokoban", "frozen_lake"])
@pytest.mark.parametrize("algo", ["starpo", "starpo-s", "grpo", "trico"])
def test_train_each_env_and_algo(tiny_model_dir, tmp_path, env, algo):
    run = tmp_path / "run"
    assert main(["train", *_overrides(tiny_model_dir, run, env, algo)]) == 0
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    for key in (
        "rollout/success_rate",
        "rollout/group_reward_std",
        "filter/kept_group_frac",
        "actor/entropy",
        "actor/grad_norm_max",
        "actor/grad_norm_mean",
        "actor/pg_clipfrac",
        "timing/rollout",
        "timing/update",
        "perf/padding_fraction",
        "val/success_rate",
    ):
        assert key in lines[-1], key
    assert ("critic/value_loss" in lines[-1]) == (algo != "grpo")
    # every phase is timed (the critic's pass too, where it is one): they add up to the step
    phases = [v for k, v in lines[-1].items() if k.startswith("timing/") and k != "timing/step"]
    assert lines[-1]["timing/step"] == pytest.approx(sum(phases) - lines[-1]["timing/validation"])
    # the context stayed token-exact with the tiny model's ChatML template
    assert lines[-1]["rollout/context_inexact"] == 0 == lines[-1]["rollout/context_fallbacks"]
    assert (run / "config.yaml").exists() and list((run / "trajectories").glob("*.jsonl"))
    assert list((run / "tensorboard").iterdir())
    ckpt = run / "checkpoints" / "step_000002"
    assert (ckpt / "actor" / "model.safetensors").exists()
    assert (ckpt / "critic").exists() == (algo != "grpo")
    # parameters changed, and the saved actor loads with from_pretrained
    before, after = _weights(tiny_model_dir), _weights(ckpt / "actor")
    assert any(not torch.equal(before[k], after[k]) for k in before if k in after)
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(ckpt / "actor")


def _metric_lines(run):
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        d = json.loads(line)
        out.append({k: v for k, v in d.items() if not k.startswith(("time", "timing/", "perf/"))})
    return out


# Bit-identical repeats are a CPU promise: CUDA's bf16 autocast and atomic-add kernels
# make no such promise, so these two tests pin the CPU on any machine.
ON_CPU = ("model.device=cpu",)


def test_resume_matches_uninterrupted_run(tiny_model_dir, tmp_path):
    full = tmp_path / "full"
    StarPOTrainer(
        load_config(_overrides(tiny_model_dir, full, "sokoban", "starpo", steps=4, extra=ON_CPU))
    ).train()
    part = tmp_path / "part"
    StarPOTrainer(
        load_config(_overrides(tiny_model_dir, part, "sokoban", "starpo", steps=2, extra=ON_CPU))
    ).train()
    resumed = load_config(
        _overrides(
            tiny_model_dir,
            part,
            "sokoban",
            "starpo",
            steps=4,
            extra=[*ON_CPU, "trainer.resume=auto"],
        )
    )
    StarPOTrainer(resumed).train()
    assert _metric_lines(part) == _metric_lines(full)
    a, b = (
        _weights(full / "checkpoints/step_000004/actor"),
        _weights(part / "checkpoints/step_000004/actor"),
    )
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_seeded_run_is_reproducible(tiny_model_dir, tmp_path):
    runs = []
    for name in ("a", "b"):
        run = tmp_path / name
        cfg = load_config(_overrides(tiny_model_dir, run, "frozen_lake", "grpo", extra=ON_CPU))
        StarPOTrainer(cfg).train()
        runs.append(_metric_lines(run))
    assert runs[0] == runs[1]


def test_existing_checkpoints_are_not_overwritten(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *_overrides(tiny_model_dir, run, "bandit", "grpo", steps=1)]) == 0
    # the automatic micro-batch budget is said, with the setting that repeats it elsewhere
    said = "".join(capsys.readouterr())
    assert "micro-batches of at most 8192 tokens" in said
    assert "set algo.micro_token_budget=8192 to repeat this run" in said
    assert main(["train", *_overrides(tiny_model_dir, run, "bandit", "grpo", steps=1)]) == 2
    assert "trainer.resume=auto" in capsys.readouterr().err


def test_resume_with_another_seed_is_a_clear_error(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *_overrides(tiny_model_dir, run, "bandit", "grpo", steps=1)]) == 0
    extra = ["trainer.resume=auto", "trainer.seed=5"]
    args = _overrides(tiny_model_dir, run, "bandit", "grpo", steps=2, extra=extra)
    assert main(["train", *args]) == 2
    assert "trainer.seed=0" in capsys.readouterr().err


def test_corrupt_checkpoint_is_a_clear_error(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *_overrides(tiny_model_dir, run, "bandit", "grpo", steps=1)]) == 0
    weights = run / "checkpoints" / "step_000001" / "actor" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF
    weights.write_bytes(bytes(data))
    code = main(
        [
            "train",
            *_overrides(
                tiny_model_dir, run, "bandit", "grpo", steps=2, extra=["trainer.resume=auto"]
            ),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "step_000001" in err


def test_lora_rl_trains_only_adapters_and_uses_base_as_reference(tiny_model_dir, tmp_path):
    run = tmp_path / "lora"
    cfg = load_config(
        _overrides(
            tiny_model_dir,
            run,
            "bandit",
            "starpo",
            steps=1,
            extra=["model.lora.rank=4", "algo.kl_coef=0.1"],
        )
    )
    trainer = StarPOTrainer(cfg)
    assert trainer.ref is None  # no second copy: the reference is the adapter-disabled model
    trainable = [n for n, p in trainer.actor.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    base_before = {
        n: p.detach().clone() for n, p in trainer.actor.named_parameters() if not p.requires_grad
    }
    history = trainer.train()
    assert "actor/kl_loss" in history[-1]
    for n, p in trainer.actor.named_parameters():
        if n in base_before:
            assert torch.equal(p, base_before[n]), n
    ckpt = run / "checkpoints" / "step_000001"
    assert (ckpt / "actor_adapter").exists() and (ckpt / "actor" / "model.safetensors").exists()


def test_context_overflow_truncates_instead_of_crashing(tiny_model_dir, tmp_path):
    run = tmp_path / "overflow"
    cfg = load_config(
        _overrides(
            tiny_model_dir, run, "sokoban", "grpo", steps=1, extra=["rollout.max_model_len=40"]
        )
    )
    history = StarPOTrainer(cfg).train()
    assert history[-1]["rollout/truncation_rate"] == 1.0
    assert history[-1]["trainer/untrained_step"] == 1.0


def test_training_console_is_readable(tiny_model_dir, tmp_path, capfd):
    """No transformers load reports or per-load progress bars in a training run."""
    run = tmp_path / "quiet"
    assert main(["train", *_overrides(tiny_model_dir, run, "bandit", "starpo", steps=1)]) == 0
    out, err = capfd.readouterr()
    for noise in ("LOAD REPORT", "MISSING", "Loading weights", "Writing model shards"):
        assert noise not in out + err, noise
    assert "critic: value head initialized to zero" in err


def test_max_minutes_stops_like_a_last_step(tiny_model_dir, tmp_path, capsys):
    """A wall-clock budget smaller than one step: step 1 runs, validates and is saved,
    then the run stops (instead of being killed and losing it)."""
    run = tmp_path / "timed"
    extra = ["trainer.max_minutes=1e-6", "trainer.val_every=5", "trainer.save_every=5"]
    cfg = load_config(_overrides(tiny_model_dir, run, "bandit", "grpo", steps=5, extra=extra))
    history = StarPOTrainer(cfg).train()
    assert len(history) == 1
    assert any(k.startswith("val/") for k in history[0])  # validated although 1 % 5 != 0
    assert [p.name for p in (run / "checkpoints").glob("step_*")] == ["step_000001"]
    assert "trainer.max_minutes=1e-06 reached" in capsys.readouterr().out


def test_max_minutes_must_be_positive():
    from ragen.errors import ConfigError

    with pytest.raises(ConfigError, match="trainer.max_minutes"):
        load_config(["trainer.max_minutes=0"])
